"""How trio runs a simulated swarm: deterministic task scheduling (a run is reproduced by its
seed) and Python's garbage collector held back to every GC_EVERY_ROUNDS virtual rounds."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from protocol.seeds import derive_seed


def seed_trio_scheduler(seed: int, *worker: int) -> None:
    # trio shuffles the order of runnable tasks with a module-level Random (to shake out
    # ordering bugs). Seeding it makes a simulated run reproducible; this is the same hook
    # pytest-trio and hypothesis-trio use for deterministic scheduling.
    # The shuffle alone is not enough: outside hypothesis, trio only reverses each batch of
    # runnable tasks, and the batch's order comes from cancel-scope deadline ties broken by id()
    # and Event wake-ups in set order, i.e. memory addresses, which differ between runs (the
    # lossy scenario diverged between two runs in one process). Deterministic mode sorts each
    # batch by task creation order before the seeded shuffle; hypothesis turns on the same flag.
    import trio._core._run as trio_run

    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    # A worker of a run over several processes (`worker`: its index) gets a stream of its own: with
    # one seed, every worker shuffled its batches alike, and the peers at one position in each
    # worker's share met the same fate (9 peers with late fetches in round 0 at 1000 peers in one
    # process; 18, in pairs 2k and 2k + 1, in two).
    trio_run._r.seed(derive_seed(seed, "trio-scheduler", *worker))


GC_EVERY_ROUNDS = 20
"""While a simulation runs, Python's cyclic garbage collector runs only every this many
virtual rounds (`collect_between_rounds`). One full collection at 1000 peers takes ~0.75 s
(it walks every peer's per-sender containers), as much as a quarter of a round; what it finds
is a few hundred cyclic objects."""


@contextlib.contextmanager
def collect_between_rounds() -> Iterator[None]:
    """No automatic garbage collection while the swarm runs: `watch_rounds` collects everything
    every GC_EVERY_ROUNDS virtual rounds instead.

    Why: a run allocates millions of objects on top of a large long-lived heap, and a collection
    walks every container made since the last one, big ones included (each peer's per-round
    lists by sender). At Python's default threshold, 100 peers x 40 rounds spent ~15% of their
    CPU collecting; at 1000 peers x 6 rounds a threshold of 20,000 still cost 2.7 of 24.3 CPU-s
    and 200,000 cost 0.9 s. What those collections found was 88 cyclic objects in all (nearly
    everything dies by reference count), and 1000 x 12 peaked at the same RSS with collection
    off. A full collection every GC_EVERY_ROUNDS rounds keeps any cyclic garbage bounded for a
    fraction of that cost. (Freezing what a collection leaves, so that the next walks only newer
    objects, did not make the next one cheaper: it is the big containers made since that cost.)
    Restored afterwards (the simulator also runs inside tests)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
