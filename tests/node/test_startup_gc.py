"""`swarmp2p node` defers full garbage collections while it starts (swarmp2p/startup_gc.py)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from swarmp2p import startup_gc


@pytest.fixture(autouse=True)
def _restored() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    startup_gc.resume_full_collections()
    gc.set_threshold(*before)


def _full_collections() -> int:
    return gc.get_stats()[2]["collections"]


def _grow_long_lived_heap(objects: int) -> list[Any]:
    """Objects that survive young collections, as an import's modules and functions do."""
    kept: list[Any] = []
    for index in range(objects):
        kept.append({"i": index, "l": [index]})
    return kept


def test_no_full_collection_runs_while_deferred_and_young_ones_still_do() -> None:
    gc.collect()
    full, young = _full_collections(), gc.get_stats()[0]["collections"]
    startup_gc.defer_full_collections()
    heap = _grow_long_lived_heap(400_000)
    assert _full_collections() == full
    assert gc.get_stats()[0]["collections"] > young  # short-lived cycles are still freed
    startup_gc.resume_full_collections()
    more = _grow_long_lived_heap(400_000)
    assert _full_collections() > full  # the usual thresholds again: the same growth collects
    del heap, more


def test_resume_restores_the_thresholds_from_before_the_first_defer() -> None:
    gc.set_threshold(900, 11, 12)
    startup_gc.defer_full_collections()
    startup_gc.defer_full_collections()  # twice: the first saved thresholds are kept
    assert gc.get_threshold() == (900, 11, startup_gc.NEVER) and startup_gc.deferred()
    startup_gc.resume_full_collections()
    assert gc.get_threshold() == (900, 11, 12) and not startup_gc.deferred()
    startup_gc.resume_full_collections()  # nothing deferred: a no-op
    assert gc.get_threshold() == (900, 11, 12)


def _invoke_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_run_node: Any) -> Any:
    import swarmp2p.node
    from swarmp2p.cli import app

    for name in list(os.environ):
        if name.startswith("SWARMP2P_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(swarmp2p.node, "run_node", fake_run_node)
    return CliRunner().invoke(app, ["node", "--data-dir", str(tmp_path / "data")])


def test_swarmp2p_node_runs_its_start_up_deferred_and_restores_the_thresholds_after(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    before = gc.get_threshold()
    seen: list[tuple[bool, tuple[int, int, int]]] = []

    async def fake_run_node(*_: Any, **__: Any) -> None:
        seen.append((startup_gc.deferred(), gc.get_threshold()))

    done = _invoke_node(monkeypatch, tmp_path, fake_run_node)
    assert done.exit_code == 0, done.output
    assert seen == [(True, (before[0], before[1], startup_gc.NEVER))]
    assert gc.get_threshold() == before and not startup_gc.deferred()


def test_a_node_that_fails_before_it_plays_restores_the_thresholds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from swarmp2p.node_config import NodeError

    before = gc.get_threshold()

    async def fake_run_node(*_: Any, **__: Any) -> None:
        assert startup_gc.deferred()
        raise NodeError("the model folder is gone")

    done = _invoke_node(monkeypatch, tmp_path, fake_run_node)
    assert done.exit_code != 0 and "the model folder is gone" in done.output
    assert gc.get_threshold() == before and not startup_gc.deferred()


WATCHER = """
import gc, os, signal, sys, threading, time
from pathlib import Path

data_dir = Path(sys.argv[1])
print("BEFORE", gc.get_threshold(), flush=True)

def watch():
    # node.json is written right after the node says it plays: the thresholds then, and stop it.
    while not (data_dir / "node.json").exists():
        time.sleep(0.05)
    print("THRESHOLDS", gc.get_threshold(), flush=True)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=watch, daemon=True).start()
sys.argv = ["swarmp2p", "node", "--data-dir", str(data_dir), "--round-seconds", "10"]
from swarmp2p.cli import main
main()
"""


def test_a_real_node_runs_with_the_usual_thresholds_once_it_plays(tmp_path: Path) -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith("SWARMP2P_")}
    done = subprocess.run(
        [sys.executable, "-c", WATCHER, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "PYTHONUNBUFFERED": "1"},
    )
    output = done.stdout + done.stderr
    assert "started: playing" in done.stdout, output
    before = [line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("BEFORE")]
    after = [line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("THRESHOLDS")]
    assert len(before) == 1 and after == before, output
