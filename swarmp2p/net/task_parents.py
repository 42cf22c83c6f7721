"""py-libp2p's service manager finds a new task's parent by a lookup, not a walk of every task.

`TrioManager.run_task` (py-libp2p 0.8.1, `libp2p/tools/anyio_service/trio_manager.py`) files
each new task under the task that spawned it, and finds that task by walking the manager's whole
task tree (`_find_parent_task`: every task and child, recursively) comparing trio tasks. Pubsub
spawns one task per received message (`Pubsub.continuously_read_stream` -> `push_msg`) from the
stream-reading task, which is not one of the manager's tasks, so each message pays a full walk
that finds nothing. At 20 processes exchanging 10 KB batches, the walk and its generators were
~7-10% of a process's py-spy samples.

`install()` remembers each answer per (manager, trio task). The answer never changes while the
trio task runs, so a remembered one is the walk's answer:
- A trio task belongs to a manager's task when that task's `run()` starts: setting it is
  `FunctionTask.run`'s first statement, before any code of the task can spawn anything. So a
  trio task that was not found is never found later.
- A found task stays in the tree until its trio task ends (it is discarded from its parent, or
  from the roots, as its run finishes; its children are reassigned, it is not). An ended trio
  task spawns nothing more.
Entries are weak on both sides: they go with the trio task (a task found is held weakly too,
since it holds its trio task).
"""

from __future__ import annotations

import weakref
from typing import Any

from libp2p.tools.anyio_service.trio_manager import TrioManager

_NOT_A_MANAGER_TASK = object()
_original_find_parent_task = TrioManager._find_parent_task


def find_parent_task_remembered(self: TrioManager, trio_task: Any) -> Any:
    """TrioManager._find_parent_task, with each trio task's answer kept (see the module doc)."""
    parents = self.__dict__.get("_swarmp2p_parents")
    if parents is None:
        parents = self.__dict__["_swarmp2p_parents"] = weakref.WeakKeyDictionary()
    kept = parents.get(trio_task)
    if kept is _NOT_A_MANAGER_TASK:
        return None
    found = kept() if kept is not None else None
    if found is None:  # not asked yet (or a task gone with its trio task, which is not asking)
        found = _original_find_parent_task(self, trio_task)
        # The task held weakly too: it holds its trio task, which would keep the entry alive.
        parents[trio_task] = _NOT_A_MANAGER_TASK if found is None else weakref.ref(found)
    return found


def install() -> None:
    """Use the remembered lookup in every py-libp2p service manager of this process (idempotent)."""
    TrioManager._find_parent_task = find_parent_task_remembered  # type: ignore[method-assign]
