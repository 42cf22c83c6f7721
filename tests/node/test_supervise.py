"""The supervisor (`swarmp2p node --restart-on-failure`, `swarmp2p supervise -- node ...`): a node
killed with SIGKILL comes back with the same peer id; a node that keeps failing at start-up gives
up with one line; the restart loop's backoff and counting, with a fake child."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarmp2p.supervise import RestartPolicy, describe_exit, supervise
from tests.helpers.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


class FakeChild:
    def __init__(self, returncode: int, clock: list[float], runs_s: float) -> None:
        self.returncode = returncode
        self._clock = clock
        self._runs_s = runs_s

    def wait(self) -> int:
        self._clock[0] += self._runs_s
        return self.returncode

    def poll(self) -> int:
        return self.returncode


def _run_fake(codes: list[tuple[int, float]], policy: RestartPolicy) -> tuple[int, list[str], int]:
    now = [0.0]
    lines: list[str] = []
    spawned = []

    def spawn(argv: object) -> FakeChild:
        code, runs = codes[len(spawned)]
        spawned.append(argv)
        return FakeChild(code, now, runs)

    status = supervise(
        ["x"], policy, say=lines.append, spawn=spawn, clock=lambda: now[0], handle_signals=False
    )
    return status, lines, len(spawned)


def test_the_loop_restarts_backs_off_and_gives_up_after_fast_failures() -> None:
    policy = RestartPolicy(initial_backoff_s=0.0, max_backoff_s=0.0, fast_s=60, max_fast_failures=3)
    # A long run between failures resets the count: 2 fast, then a slow one (the new first), 2 fast.
    codes = [(1, 1), (-9, 1), (1, 120), (1, 1), (1, 1), (0, 1)]
    status, lines, starts = _run_fake(codes, policy)
    assert (status, starts) == (1, 5)
    assert "was killed by SIGKILL after 1.0 s" in lines[1]
    giving_up = [line for line in lines if "giving up" in line]
    assert giving_up == [lines[-1]] and "3 times in a row" in lines[-1]
    # A clean exit ends it at once.
    assert _run_fake([(0, 5)], policy)[::2] == (0, 1)


def test_the_default_policy_is_the_documented_one() -> None:
    """docs/node.md: waits 1 s, then doubles up to 60 s; gives up after 5 failures in a row that
    each came within 60 s of starting (the real-node test below uses a smaller count)."""
    assert RestartPolicy() == RestartPolicy(
        initial_backoff_s=1.0, max_backoff_s=60.0, fast_s=60.0, max_fast_failures=5
    )


def test_describe_exit() -> None:
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(3) == "exited with status 3"


def _fast_config(path: Path) -> Path:
    path.write_text(
        """
[node]
questions_per_round = 2
n_local = 2
n_external = 2
round_seconds = 8

[trainer]
tasks = ["basic_arithmetic"]
threads = 1
format_reward = 0.5
max_new_tokens = 16
tiny_hidden_size = 32
tiny_pretrain_steps = 0
"""
    )
    return path


@pytest.mark.slow
def test_a_node_killed_with_sigkill_comes_back_with_the_same_peer_id(tmp_path: Path) -> None:
    data_dir = tmp_path / "node"
    config = _fast_config(tmp_path / "fast.toml")
    log = (tmp_path / "out.log").open("wb")
    supervisor = subprocess.Popen(
        [
            sys.executable, "-m", "swarmp2p.cli", "node", "--restart-on-failure",
            "--config", str(config), "--data-dir", str(data_dir),
        ],
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    node_file = data_dir / "node.json"

    def output() -> str:
        return (tmp_path / "out.log").read_text(errors="replace")

    try:
        wait_for(node_file.exists, 120, "the supervised node to start")
        first = json.loads(node_file.read_text())
        assert first["pid"] != supervisor.pid  # the node is a child of the supervisor
        os.kill(first["pid"], signal.SIGKILL)

        def restarted() -> bool:
            assert supervisor.poll() is None, output()
            if not node_file.exists():
                return False
            try:
                return json.loads(node_file.read_text())["pid"] != first["pid"]
            except (ValueError, KeyError):
                return False

        wait_for(restarted, 120, "the node to come back")
        second = json.loads(node_file.read_text())
        assert second["peer_id"] == first["peer_id"], output()
        assert "supervisor: the node was killed by SIGKILL" in output()
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=30) == 0, output()
        time.sleep(0.5)
        with pytest.raises(ProcessLookupError):
            os.kill(second["pid"], 0)  # the node stopped with its supervisor
    except BaseException:
        print(output())
        raise
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()


@pytest.mark.slow
def test_a_node_failing_at_start_up_three_times_gives_up_with_one_line(tmp_path: Path) -> None:
    # Three, not the default five: each failed start costs a node's imports (~5 s); the count
    # itself is the loop's (the fake-child test above), this shows it on a real failing node.
    done = subprocess.run(
        [
            sys.executable, "-m", "swarmp2p.cli", "supervise", "--initial-backoff", "0.1",
            "--max-fast-failures", "3", "--",
            "node", "--data-dir", str(tmp_path / "node"), "--listen", "/ip4/127.0.0.1/tcp/notaport",
        ],
        capture_output=True, text=True, timeout=180, cwd=REPO,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert sum("network settings" in line for line in lines) == 3, done.stderr  # three starts
    giving_up = [line for line in lines if "giving up" in line]
    assert giving_up == [lines[-1]], done.stderr
    assert "failed 3 times in a row" in lines[-1]
