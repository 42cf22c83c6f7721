"""Large freed buffers go back to the operating system (glibc's malloc), so a node's memory
returns to its level after a burst of big messages.

glibc serves an allocation above its mmap threshold (128 KiB at start) with its own mmap, and
unmaps it when it is freed. But the threshold is dynamic: the first time such a chunk is freed,
glibc raises the threshold to that chunk's size. From then on, ~1 MiB buffers (DHT records,
fetched batches, their hex forms in py-libp2p's log formatting) come from the heap. Small
long-lived objects allocated between them pin that heap memory, so it stays resident after the
buffers are freed. The DHT-abuse attack of issue 15 left a node +99 MB (docs/reliability.md).
In tests/test_memory_release.py, a hundred 1 MB buffers interleaved with small objects leave
95 MB resident after their release; with the threshold fixed, none.

Fixing the threshold (`mallopt(M_MMAP_THRESHOLD, 128 KiB)`) also turns the dynamic adjustment
off. Allocations of 128 KiB and more then always use mmap: a syscall pair each, negligible next
to the network and model work of a message that size. This does nothing where the C library is
not glibc (musl, macOS): `configure()` says whether it applied.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # <malloc.h>
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value


def configure() -> bool:
    """Fix glibc's mmap threshold for this process; True when it was set."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc: no mallopt
        return False
    applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not applied:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused: large buffers may stay resident after release")
    return applied
