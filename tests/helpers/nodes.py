"""Real `swarmp2p node` OS processes for tests: a warmed-up tiny model shared by every swarm's nodes,
a fast node config, the process wrapper, and a report of every node's rounds for a failure message.

The tiny model is built and warmed up ONCE per session (a few supervised steps, so that GRPO groups
have reward variance and are not all dropped) and saved as a model folder every node loads.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.waiting import wait_for

TASKS = ("basic_arithmetic", "base_conversion")
ROUND_SECONDS = 10.0


def build_warm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The warmed-up tiny model folder (tests/conftest.py serves it as the `warm_model` fixture):
    netlab's, the one the netns swarms and their bench load too."""
    from netlab.netns_harness import build_warm_model as build

    return build(tmp_path_factory.mktemp("model"))


TEST_TRAINER = {"eval_questions": 2}
"""[trainer] keys of every test swarm's nodes (also the netns swarms', netlab/netns_harness.py): a
node's held-out evaluation is the trainer's to test (tests/trainer, tests/node/test_node_eval.py);
here two questions per task keep it in the loop for less CPU (a lone node's first 45 s: 11.4 s
of CPU with the default 100, 9.2 s with 2)."""


def write_config(
    path: Path,
    *,
    tasks: tuple[str, ...] = TASKS,
    format_reward: float = 0.5,
    questions_per_round: int = 2,
    **node: Any,
) -> Path:
    node_lines = "\n".join(f"{key} = {json.dumps(value)}" for key, value in node.items())
    trainer = "".join(f"{key} = {json.dumps(value)}\n" for key, value in TEST_TRAINER.items())
    path.write_text(
        f"""
[node]
round_seconds = {ROUND_SECONDS}
hello_interval_s = 2.0
# Two local groups + up to four external ones (at most two per peer) keep a round's training
# short enough for five processes sharing two cores.
questions_per_round = {questions_per_round}
n_local = 2
n_external = 4
max_groups_per_peer = 2
{node_lines}

[trainer]
tasks = {json.dumps(list(tasks))}
threads = 1
format_reward = {format_reward}
max_new_tokens = 32
{trainer}"""
    )
    return path


class NodeProcess:
    """One `swarmp2p node` OS process, started through the CLI."""

    def __init__(self, data_dir: Path, config: Path, model: Path, extra: list[str]) -> None:
        self.data_dir = data_dir
        self.args = [
            sys.executable, "-m", "swarmp2p.cli", "node",
            "--config", str(config), "--data-dir", str(data_dir), "--model", str(model), *extra,
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "node.json").unlink(missing_ok=True)
        self.starts += 1
        log = (self.data_dir / f"stdout-{self.starts}.log").open("wb")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=env)

    def info(self, timeout_s: float = 90) -> dict[str, Any]:
        path = self.data_dir / "node.json"
        wait_for(lambda: path.exists() or self.exited(), timeout_s, f"{self.data_dir} to start")
        assert not self.exited(), f"node exited early:\n{self.output()}"
        return json.loads(path.read_text())

    def rounds(self) -> list[dict[str, Any]]:
        path = self.data_dir / "rounds.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def exited(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def output(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-3000:] for p in sorted(self.data_dir.glob("stdout-*.log"))
        )

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15) -> int | None:
        if self.process is None or self.exited():
            return self.process.returncode if self.process else None
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None


def by_round(node: NodeProcess) -> dict[int, dict[str, Any]]:
    return {record["round"]: record for record in node.rounds()}


def swarm_report(nodes: list[NodeProcess]) -> str:
    """Every node's round timeline and log tail: printed when the test fails, so that a CI
    failure says which node fell behind, when, and why (generation, training, network)."""
    lines = []
    for node in nodes:
        state = "not started" if node.process is None else f"exit code {node.process.poll()}"
        lines.append(f"===== {node.data_dir.name} ({state})")
        for record in node.rounds():
            opened = record["opened_ms"]
            lines.append(
                f"  round {record['round']:>3} {'done' if record['completed'] else 'ABANDONED'}"
                f" opened {opened / 1000:.1f} (+{(record['finished_ms'] - opened) / 1000:.1f}s)"
                f" accepted {len(record['accepted_peers'])} trained_on"
                f" {len(record['external_peers_trained_on'])} seconds {record.get('seconds', {})}"
                f" rejected {record['rejected']} network {record.get('network_drops', {})}"
            )
        lines.append(node.output())
    return "\n".join(lines)
