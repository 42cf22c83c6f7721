"""Large freed buffers go back to the operating system (glibc's malloc), so a node's memory
returns to its level after a burst of big messages.

glibc serves an allocation above its mmap threshold (128 KiB at start) with its own mmap, and
unmaps it when it is freed. But the threshold is dynamic: the first time such a chunk is freed,
glibc raises the threshold to that chunk's size. From then on, ~1 MiB buffers (DHT records,
fetched batches, their hex forms in py-libp2p's log formatting) come from the heap. Small
long-lived objects allocated between them pin that heap memory, so it stays resident after the
buffers are freed. A DHT-abuse attack left a node +99 MB (docs/reliability.md).
In tests/node/test_memory_release.py, a hundred 1 MB buffers interleaved with small objects leave
95 MB resident after their release; with the threshold fixed, none.

Fixing the threshold (`mallopt(M_MMAP_THRESHOLD, 128 KiB)`) also turns the dynamic adjustment
off. Allocations of 128 KiB and more then always use mmap: a syscall pair each, negligible next
to the network and model work of a message that size. This does nothing where the C library is
not glibc (musl, macOS): `configure()` says whether it applied.

Buffers below the threshold (py-libp2p's noise frames are at most 64 KiB, a 1 MB record arrives
as sixteen of them) still come from the heap, and glibc returns heap pages to the system only
from its top. After the DHT-abuse attack the heap held ~20 MB of free pages between live
objects for several rounds; `malloc_trim(0)` hands such pages back (madvise), and
`give_back_periodically` does so every few seconds while the node runs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from typing import Any

import trio

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # <malloc.h>
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value


# How often a running node hands free heap pages back: a trim that returns ~90 MB takes ~10 ms
# (tests/node/test_memory_release.py), one with little to return less, and memory freed after a
# burst is back within one round of the default length.
GIVE_BACK_INTERVAL_S = 5.0


@functools.cache
def _glibc_function(name: str) -> Any | None:
    """`name` from the process's C library when it is glibc's (has mallopt / malloc_trim), else None."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        return getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):  # not glibc
        return None


def configure() -> bool:
    """Fix glibc's mmap threshold for this process; True when it was set."""
    mallopt = _glibc_function("mallopt")
    if mallopt is None:
        return False
    applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not applied:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused: large buffers may stay resident after release")
    return applied


def give_back() -> bool:
    """Return the heap's free pages to the system now (glibc's malloc_trim); True when some were."""
    malloc_trim = _glibc_function("malloc_trim")
    return bool(malloc_trim(0)) if malloc_trim is not None else False


async def give_back_periodically(interval_s: float = GIVE_BACK_INTERVAL_S) -> None:
    """`give_back()` every `interval_s` for as long as the caller's nursery runs."""
    if _glibc_function("malloc_trim") is None:
        return
    while True:
        await trio.sleep(interval_s)
        give_back()
