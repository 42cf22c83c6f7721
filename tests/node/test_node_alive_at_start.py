"""A starting node answers at once and plays at once: the dashboard, `/healthz` (with the node's
phase) and `/metrics` are served while the model loads, and the held-out evaluation before
training never holds the node up: it is answered in slices in the worker thread's spare moments
while the node plays its first rounds, `/healthz` saying `evaluating` meanwhile. An in-process
Node on a real libp2p host with a real (small, raw) tiny trainer whose held-out units last
until the test lets them go (or the node stops them at a deadline)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trio

import swarmp2p.node
from swarmp2p.node import Node, NodeConfig
from tests.helpers.waiting import free_port
from trainer.config import TrainerConfig
from trainer.policy import TrainerPolicy


class HeldEvaluation(TrainerPolicy):
    """The tiny trainer, but each held-out unit (and a whole evaluation) waits for `release`;
    like a slow unit, it stops at the node's cancel (a deadline, or the node's stop)."""

    def __init__(self, config: TrainerConfig) -> None:
        super().__init__(config)
        self.started = threading.Event()
        self.release = threading.Event()
        self.units_answered = 0

    def _held(self) -> None:
        self.started.set()
        while not self.release.wait(0.05):
            self._check_cancel()

    def evaluate(self, split: str | None = None, step: int | None = None) -> dict[str, Any]:
        self._held()
        return super().evaluate(split, step)

    def sliced_evaluation(self, split: str | None = None, chunk: int = 64) -> Any:
        sliced = super().sliced_evaluation(split, chunk)
        answer = sliced.answer_next

        def held_answer() -> int:
            self._held()
            questions = answer()
            self.units_answered += 1
            return questions

        sliced.answer_next = held_answer
        return sliced


def trainer_config(data_dir: Path) -> TrainerConfig:
    return TrainerConfig(
        data_dir=str(data_dir),
        tasks=("basic_arithmetic",),
        difficulty=0,
        tiny_hidden_size=32,
        tiny_layers=1,
        tiny_pretrain_steps=0,
        max_new_tokens=8,
        eval_every=5,
        eval_before_train=True,
        eval_questions=8,  # at most 8 x 4 samples: one unit
        threads=1,
    )


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def completed_rounds(data_dir: Path) -> list[int]:
    try:
        lines = (data_dir / "rounds.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    records = [json.loads(line) for line in lines if line.strip()]
    return [record["round"] for record in records if record.get("completed")]


def start_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, round_seconds: float = 30.0
) -> tuple[Node, HeldEvaluation, str]:
    trainer = HeldEvaluation(trainer_config(tmp_path / "trainer"))
    monkeypatch.setattr(swarmp2p.node, "build_policy", lambda *args, **kwargs: trainer)
    port = free_port()
    config = NodeConfig(
        data_dir=str(tmp_path / "node"), dashboard_port=port, warmup_steps=0, round_seconds=round_seconds
    )
    node = Node(config, trainer.config, echo=lambda line: None)
    return node, trainer, f"http://127.0.0.1:{port}"


def run_with_probe(node: Node, trainer: HeldEvaluation, probe: Any) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(probe)
            with trio.fail_after(240):
                await node.run()

    try:
        trio.run(main)
    finally:
        trainer.release.set()


def test_dashboard_healthz_and_metrics_answer_while_the_first_evaluation_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, trainer, base = start_node(tmp_path, monkeypatch)
    seen: dict[str, Any] = {}

    async def probe() -> None:
        with trio.fail_after(120):
            await trio.to_thread.run_sync(trainer.started.wait, 120)
        # A held-out unit is running (and stays so until released): the node must answer now.
        code, body = await trio.to_thread.run_sync(get, base + "/healthz")
        seen["healthz"] = (code, json.loads(body))
        code, body = await trio.to_thread.run_sync(get, base + "/metrics")
        seen["metrics"] = (code, body.decode())
        code, body = await trio.to_thread.run_sync(get, base + "/api/status")
        seen["status"] = (code, json.loads(body))
        node.stop("test done")

    run_with_probe(node, trainer, probe)
    code, health = seen["healthz"]
    assert code == 200 and health["ok"] is True, health
    assert health["phase"] == "evaluating", health
    assert health["peer_id"]
    code, metrics = seen["metrics"]
    assert code == 200 and 'phase="evaluating"' in metrics, metrics[:2000]
    assert "swarmp2p_network_drops_total" in metrics
    code, status = seen["status"]
    assert code == 200 and status["node_phase"] == "evaluating", status
    assert status["eval_progress"] == {"units": 1, "done": 0, "since_round": None}, status


def test_a_node_with_a_slow_first_evaluation_plays_its_first_rounds_before_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, trainer, base = start_node(tmp_path, monkeypatch, round_seconds=8.0)
    data_dir = tmp_path / "node"
    seen: dict[str, Any] = {}

    async def probe() -> None:
        with trio.fail_after(120):
            await trio.to_thread.run_sync(trainer.started.wait, 120)
        # The evaluation is held: rounds 0 and 1 must still be played, trained and reported.
        deadline = time.monotonic() + 90
        while len(completed_rounds(data_dir)) < 2 and time.monotonic() < deadline:
            await trio.sleep(0.5)
        seen["rounds_while_held"] = completed_rounds(data_dir)
        seen["units_while_held"] = trainer.units_answered
        _code, body = await trio.to_thread.run_sync(get, base + "/healthz")
        seen["phase_while_held"] = json.loads(body)["phase"]
        trainer.release.set()
        # Released: the evaluation completes in a later spare moment, and the node says playing.
        deadline = time.monotonic() + 90
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            _code, body = await trio.to_thread.run_sync(get, base + "/api/status")
            status = json.loads(body)
            if status.get("eval_history"):
                break
            await trio.sleep(0.5)
        seen["status"] = status
        _code, body = await trio.to_thread.run_sync(get, base + "/healthz")
        seen["phase_after"] = json.loads(body)["phase"]
        node.stop("test done")

    run_with_probe(node, trainer, probe)
    assert len(seen["rounds_while_held"]) >= 2, seen
    assert seen["units_while_held"] == 0 and seen["phase_while_held"] == "evaluating", seen
    status = seen["status"]
    [point] = status["eval_history"]
    result = status["eval"]
    assert result["questions"] > 0
    assert sum(piece["questions"] for piece in result["slices"]) == result["questions"]
    assert point["round"] is not None and point["round"] >= 1  # trained weights: not the start point
    assert seen["phase_after"] == "playing", seen
