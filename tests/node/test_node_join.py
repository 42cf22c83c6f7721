"""A node as a new user meets it: it prints its dashboard URL and a join command that works when
pasted (a real data dir, no `<placeholder>` the shell reads as a redirection, no sudo); the
dashboard answers /healthz and lists the connected peers by id; a second node on the same data
dir is refused; a stopped node leaves no node.json behind.

The 2-node test runs real `swarmp2p node` processes with a tiny untrained model (64 wide, no
pre-training) so that start-up takes seconds on a shared 2-core machine.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from swarmp2p.join_command import join_command
from swarmp2p.node_config import NodeConfig
from tests.helpers.waiting import free_port, wait_for

ENV = {
    **{k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"},
    "OMP_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
}
CONFIG = """
[node]
round_seconds = 8.0
hello_interval_s = 1.0
questions_per_round = 1
n_local = 1
n_external = 2
warmup_steps = 0

[trainer]
tasks = ["basic_arithmetic", "calendar_arithmetic"]
tiny_hidden_size = 64
tiny_pretrain_steps = 0
threads = 1
max_new_tokens = 8
num_generations = 2
eval_every = 0
"""
JOIN_LINE = re.compile(r"^\s+(swarmp2p node .*)$", re.MULTILINE)


def _check_pasteable(command: str, own_data_dir: Path) -> list[str]:
    """The words a POSIX shell gives the command, checked: no placeholder, no redirection, no sudo,
    a data dir of its own that does not exist yet."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    assert words == shlex.split(command), f"the shell would see operators in {command!r}: {words}"
    assert not any(mark in command for mark in "<>|;&`$"), command
    assert words[:2] == ["swarmp2p", "node"] and "sudo" not in words, words
    data_dir = Path(words[words.index("--data-dir") + 1])
    assert data_dir.is_absolute() and not data_dir.exists(), data_dir
    assert data_dir.resolve() != own_data_dir.resolve()
    return words


def test_the_join_command_is_pasteable_and_quotes_odd_paths(tmp_path: Path) -> None:
    own = tmp_path / "my data"
    own.mkdir()
    (tmp_path / "my data-2").mkdir()  # taken: the next free sibling is suggested
    config = tmp_path / "it's.toml"
    addr = "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWabc"
    command = join_command(NodeConfig(data_dir=str(own), model=str(tmp_path)), own, addr, config)
    words = _check_pasteable(command, own)
    assert words == [
        "swarmp2p", "node", "--data-dir", str(tmp_path / "my data-3"), "--config", str(config),
        "--model", str(tmp_path), "--bootstrap", addr,
    ]  # fmt: skip
    # A shared config file must not hand the joiner this node's identity, ports or dashboard.
    fixed = NodeConfig(
        data_dir=str(own), identity="node.key", listen=("/ip4/0.0.0.0/tcp/4001",), dashboard_port=8080
    )
    words = _check_pasteable(join_command(fixed, own, addr, config), own)
    assert words[words.index("--identity") + 1] == str(tmp_path / "my data-3" / "identity.key")
    assert words[words.index("--listen") + 1] == "/ip4/0.0.0.0/tcp/0"
    assert words[words.index("--dashboard-port") + 1] == "0"
    plain = join_command(NodeConfig(), Path(".swarmp2p"), addr)
    assert shlex.split(plain)[2:] == ["--data-dir", str(Path(".swarmp2p-2").resolve()), "--bootstrap", addr]


def _get_json(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


class Node:
    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "swarmp2p.cli", *argv],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            env=ENV,
            cwd=log.parent,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_output(self, pattern: re.Pattern[str] | str, timeout_s: float = 120) -> re.Match[str]:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern

        def found() -> re.Match[str] | None:
            assert self.process.poll() is None, f"node exited early:\n{self.output()}"
            return regex.search(self.output())

        return wait_for(found, timeout_s, f"{regex.pattern!r} in {self.log}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise


def test_two_nodes_from_the_printed_command_with_dashboard_healthz_peers_and_the_lock(tmp_path: Path) -> None:
    config = tmp_path / "swarm.toml"
    config.write_text(CONFIG)
    first_dir = tmp_path / "first"
    port = free_port()
    argv = ["node", "--config", str(config), "--data-dir", str(first_dir), "--dashboard-port", str(port)]
    first = Node(
        [*argv, "--tensorboard", str(tmp_path / "tb"), "--wandb", str(tmp_path / "wb")],
        tmp_path / "first.log",
    )
    nodes = [first]
    try:
        command = first.wait_output(JOIN_LINE).group(1)
        words = _check_pasteable(command, first_dir)
        url = first.wait_output(r"dashboard: (http://127\.0\.0\.1:\d+/)").group(1)
        assert url == f"http://127.0.0.1:{port}/"
        code, health = _get_json(url + "healthz")
        assert code == 200 and health["ok"] is True and health["peer_id"], health

        # Run the printed command as it is (the `swarmp2p` script is this interpreter's module).
        second_dir = Path(words[words.index("--data-dir") + 1])
        second = Node(words[1:], tmp_path / "second.log")
        nodes.append(second)
        second.wait_output(r"listening on")
        second_id = wait_for(
            lambda: (
                (second_dir / "node.json").exists() and json.loads((second_dir / "node.json").read_text())
            ),
            120,
            "the second node's node.json",
        )["peer_id"]

        def lists_second() -> dict[str, Any] | None:
            status = _get_json(url + "api/status")[1]
            return status if second_id in status["peers"] else None

        status = wait_for(lists_second, 60, "the second node in /api/status peers")
        assert status["peer_count"] == len(status["peers"]) >= 1
        assert _get_json(url + "healthz")[1]["peers"] >= 1

        # A third process on the first node's data dir: one line naming its pid, exit code 2.
        third = subprocess.run(
            [sys.executable, "-m", "swarmp2p.cli", "node", "--data-dir", str(first_dir)],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=120,
        )
        assert third.returncode == 2, third.stdout + third.stderr
        lines = [line for line in third.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and f"pid {first.process.pid}" in lines[0], third.stderr
    finally:
        codes = [node.stop() for node in nodes]
    assert codes == [0] * len(nodes), "\n".join(node.output()[-3000:] for node in nodes)
    for data_dir in (first_dir, second_dir):
        assert not (data_dir / "node.json").exists(), f"{data_dir}/node.json left by a stopped node"

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    rounds = [event.step for event in events.Scalars("round/reward")]
    assert rounds and rounds == sorted(rounds), rounds
    from tests.helpers.wandb_runs import history  # the same rounds in the node's offline W&B run

    assert [row["_step"] for row in history(tmp_path / "wb") if "round/reward" in row] == rounds
