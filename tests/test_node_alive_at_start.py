"""A starting node answers at once: the dashboard, `/healthz` (with the node's phase) and
`/metrics` are served while the model loads and the held-out evaluation runs before joining (a
minute on a busy host), not only once it plays. An in-process Node on a real libp2p host whose
trainer is replaced by one whose evaluation waits until the test lets it go."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trio

import swarmp2p.node
from swarmp2p.node import Node, NodeConfig
from trainer.config import TrainerConfig


class HeldEvaluation:
    """A trainer whose held-out evaluation lasts until `release` is set (or it is cancelled)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.step = 0

    def evaluate(self) -> dict[str, Any]:
        self.started.set()
        self.release.wait(60)
        return {"accuracy": 0.0, "reward": 0.0, "questions": 1, "step": 0}

    def cancel(self) -> None:
        self.release.set()

    def reset_cancel(self) -> None:
        return

    def save(self) -> None:
        return

    def load(self) -> bool:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_dashboard_healthz_and_metrics_answer_while_the_node_evaluates_before_joining(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = HeldEvaluation()
    monkeypatch.setattr(swarmp2p.node, "build_policy", lambda *args, **kwargs: trainer)
    port = free_port()
    config = NodeConfig(data_dir=str(tmp_path / "node"), dashboard_port=port, warmup_steps=0)
    trainer_config = TrainerConfig(
        tasks=("basic_arithmetic",), eval_every=5, eval_before_train=True, eval_questions=1, threads=1
    )
    node = Node(config, trainer_config, echo=lambda line: None)
    base = f"http://127.0.0.1:{port}"
    seen: dict[str, Any] = {}

    async def probe() -> None:
        with trio.fail_after(120):
            await trio.to_thread.run_sync(trainer.started.wait, 120)
        # The evaluation is running (and stays so until released): the node must answer now.
        code, body = await trio.to_thread.run_sync(get, base + "/healthz")
        seen["healthz"] = (code, json.loads(body))
        code, body = await trio.to_thread.run_sync(get, base + "/metrics")
        seen["metrics"] = (code, body.decode())
        code, body = await trio.to_thread.run_sync(get, base + "/api/status")
        seen["status"] = (code, json.loads(body))
        node.stop("test done")
        trainer.release.set()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(probe)
            with trio.fail_after(180):
                await node.run()

    try:
        trio.run(main)
    finally:
        trainer.release.set()
    code, health = seen["healthz"]
    assert code == 200 and health["ok"] is True, health
    assert health["phase"] == "evaluating", health
    assert health["peer_id"]
    code, metrics = seen["metrics"]
    assert code == 200 and 'phase="evaluating"' in metrics, metrics[:2000]
    assert "swarmp2p_network_drops_total" in metrics
    code, status = seen["status"]
    assert code == 200 and status["node_phase"] == "evaluating", status
