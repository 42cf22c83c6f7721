"""No full garbage collections while a node starts: its imports build a large heap that is all alive.

A node's start-up imports torch, transformers' model modules, reasoning-gym and py-libp2p: about
half a million long-lived objects. CPython runs a full (oldest-generation) collection each time
the objects that survived the young collections since the last full one reach a quarter of the
long-lived heap, so the growing import heap is scanned again and again (7 full collections in
those imports), and every scan finds almost nothing to free (16k objects of ~500k). Measured on
2 cores: the imports took 8.2-10.7 s with the default thresholds and 5.6-8.3 s without full
collections (bench/bench_startup.py measures the whole start-up, docs/benchmarks.md).

Only the full collections are deferred: young collections still run, so short-lived cycles are
freed as usual. Once the node plays, the usual thresholds come back, and the next full
collection frees whatever start-up left. This is the generational collector's third threshold
(CPython 3.11-3.13, what this was measured on); a collector that does not use it is unaffected.
"""

from __future__ import annotations

import gc

NEVER = 2**31 - 1
"""The oldest generation's threshold while deferred: never reached (it counts young collections)."""

_saved: tuple[int, int, int] | None = None


def defer_full_collections() -> None:
    """From now until `resume_full_collections`, no full collection runs (young ones do)."""
    global _saved
    if _saved is not None:
        return  # already deferred: keep the thresholds saved first
    _saved = gc.get_threshold()
    gc.set_threshold(_saved[0], _saved[1], NEVER)


def resume_full_collections() -> None:
    """The thresholds from before `defer_full_collections` (a no-op when nothing was deferred)."""
    global _saved
    if _saved is None:
        return
    gc.set_threshold(*_saved)
    _saved = None


def deferred() -> bool:
    return _saved is not None
