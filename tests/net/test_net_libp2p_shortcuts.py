"""Two py-libp2p costs cut without changing what py-libp2p decides: the service manager's parent
lookup (swarmp2p/net/task_parents.py) and yamux's environment knobs (swarmp2p/net/yamux_knobs.py)."""

from __future__ import annotations

import gc
import os
from typing import Any

import pytest
import trio
from libp2p.stream_muxer.yamux import yamux as yamux_module
from libp2p.tools.anyio_service import Service, background_trio_service
from libp2p.tools.anyio_service.trio_manager import TrioManager

from swarmp2p.net import task_parents, yamux_knobs


class _Spawner(Service):
    """A service whose tasks spawn tasks, recording each spawned task's parent as the manager
    filed it."""

    def __init__(self) -> None:
        self.child_ready = trio.Event()
        self.grandchild_ready = trio.Event()
        self.release = trio.Event()
        self.child_trio_task: Any = None

    async def run(self) -> None:
        self.manager.run_task(self.child)
        await self.release.wait()

    async def child(self) -> None:
        self.child_trio_task = trio.lowlevel.current_task()
        self.manager.run_task(self.grandchild)
        self.manager.run_task(self.grandchild)  # asked twice from the same trio task
        self.child_ready.set()
        await self.release.wait()

    async def grandchild(self) -> None:
        self.grandchild_ready.set()
        await self.release.wait()


def _walks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Install the remembered lookup over a spy of py-libp2p's walk; returns the ids of the trio
    tasks walked for (ids: the spy must not keep the tasks alive)."""
    walked: list[int] = []
    original = task_parents._original_find_parent_task

    def spy(self: TrioManager, trio_task: Any) -> Any:
        walked.append(id(trio_task))
        return original(self, trio_task)

    monkeypatch.setattr(task_parents, "_original_find_parent_task", spy)
    monkeypatch.setattr(TrioManager, "_find_parent_task", TrioManager._find_parent_task)
    task_parents.install()
    return walked


def test_tasks_are_filed_under_the_task_that_spawned_them_with_one_walk_per_trio_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trio.run(_filed_under_their_spawner, _walks(monkeypatch))


async def _filed_under_their_spawner(walked: list[int]) -> None:
    spawner = _Spawner()
    async with background_trio_service(spawner) as manager:
        with trio.fail_after(5):
            await spawner.child_ready.wait()
            await spawner.grandchild_ready.wait()
        # The child's trio task was walked for once, not once per spawn.
        assert walked.count(id(spawner.child_trio_task)) == 1
        child = task_parents._original_find_parent_task(manager, spawner.child_trio_task)
        assert child is not None
        # Both grandchildren are the child's children, as py-libp2p's walk files them...
        assert len(child.children) == 2
        assert all(grandchild.parent is child for grandchild in child.children)

        # A trio task that is none of the manager's tasks: its spawns are roots, walked for once.
        roots_before = set(manager._root_tasks)
        outsider = trio.lowlevel.current_task()
        for _ in range(3):
            manager.run_task(trio.sleep_forever)
        new_roots = set(manager._root_tasks) - roots_before
        assert len(new_roots) == 3 and all(task.parent is None for task in new_roots)
        assert walked.count(id(outsider)) == 1
        spawner.release.set()
        manager.cancel()


def test_remembered_answers_go_with_their_trio_task(monkeypatch: pytest.MonkeyPatch) -> None:
    _walks(monkeypatch)
    trio.run(_answers_go_with_their_trio_task)


async def _answers_go_with_their_trio_task() -> None:
    # As pubsub does: short-lived trio tasks outside the manager (its stream readers) spawn
    # manager tasks. Their answers must not outlive them while the manager runs on.
    spawner = _Spawner()
    async with background_trio_service(spawner) as manager:
        with trio.fail_after(5):
            await spawner.child_ready.wait()
        parents = manager.__dict__["_swarmp2p_parents"]
        before = len(parents)

        done_reading = trio.Event()

        async def reader() -> None:
            manager.run_task(trio.sleep, 0)
            await done_reading.wait()

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(reader)
            await trio.sleep(0.01)
            assert len(parents) == before + 20
            done_reading.set()
        await trio.sleep(0.01)
        gc.collect()
        assert len(parents) == before
        spawner.release.set()
        manager.cancel()


def test_yamux_knobs_are_read_once_with_py_libp2p_s_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in yamux_knobs.KNOBS:  # fresh readers for this test; restored after it
        reader = getattr(yamux_module, name)
        monkeypatch.setattr(yamux_module, name, getattr(reader, "__wrapped__", reader))
    monkeypatch.setenv("PY_YAMUX_BATCH_THRESHOLD_DIV", "4")
    monkeypatch.setenv("PY_YAMUX_RELEASE_ON_READ", "no")
    assert yamux_module._yamux_batch_threshold_divisor() == 4  # read from the environment...
    yamux_knobs.install()
    yamux_knobs.install()  # idempotent
    lookups: list[str] = []
    real_getenv = os.getenv

    def counting_getenv(key: str, default: Any = None) -> Any:
        lookups.append(key)
        return real_getenv(key, default)

    monkeypatch.setattr(os, "getenv", counting_getenv)
    monkeypatch.setenv("PY_YAMUX_BATCH_THRESHOLD_DIV", "8")
    assert yamux_module._yamux_batch_threshold_divisor() == 4  # ...then kept
    assert yamux_module._yamux_release_on_read() is False
    assert yamux_module._perf_yamux_debug_enabled() is False
    assert yamux_module._yamux_data_read_timeout() == 60.0
    assert lookups == []
