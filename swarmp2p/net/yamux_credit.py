"""Yamux receive-window credit returned in half windows, as go-yamux does, not after every read.

py-libp2p 0.8.1's yamux sends a WINDOW_UPDATE frame after every read of a stream by default
(`PY_YAMUX_RELEASE_ON_READ=1`). With that knob at 0 it still sends one on every other read: its
"partial slack" branch fires whenever any read bytes are uncredited, and grants the bytes read
twice (the window then sits above its size until the next read). Each update costs the reader
one more frame through noise encryption and a socket write, and the writer one more read,
decryption and dispatch: at 20 processes exchanging 10 KB batches the updates were ~15% of a
process's py-spy samples with the knob at 1, and still ~10-12% at 0.

`install()` replaces the rule with go-yamux's `sendWindowUpdate`: the credit owed is what the
application has read and not yet been returned (window size - remaining credit - unread
buffer); it is sent once it reaches half the window, never before and never more. A writer is
never stuck: when its credit is 0, everything it sent is buffered or read, so reading the
buffer makes the whole window owed. go-yamux's auto-tuning is kept (py-libp2p's own
`_apply_autotune_epoch`: the window doubles, up to 16 MiB, when updates come within 4 RTT).
"""

from __future__ import annotations

from typing import Any

from libp2p.stream_muxer.yamux.yamux import MAX_WINDOW_SIZE, YamuxStream


async def return_credit_in_half_windows(self: YamuxStream, *, bytes_read: int = 0) -> None:
    """YamuxStream._auto_tune_and_send_window_update with go-yamux's rule (`bytes_read` is
    implied by the buffer: what left it was read)."""
    async with self.window_lock:
        buffered = len(self.conn.stream_buffers.get(self.stream_id, b""))
        owed = self.target_recv_window - (self.recv_window + buffered)
        if owed <= 0 or owed < self._grow_threshold():
            return
        self.recv_window += owed
        increment = owed + self._apply_autotune_epoch(buffered)
    # Outside the lock, as py-libp2p does: inbound WINDOW_UPDATE handling takes it too.
    await self.send_window_update(increment, skip_lock=True)


async def grant_receive_window(stream: Any, total: int) -> int:
    """Open a fresh request stream's receive window to `total` bytes (at most go-yamux's 16 MiB)
    before the request goes out, so the server can send an answer of up to that size without
    stopping for credit. Returns the bytes granted (0: the window was that large already, or
    the stream is not yamux).

    Why: every yamux stream starts with 256 KiB of credit, and a request opens a new stream
    for each fetch, so auto-tuning never gets to grow it. A 1 MB answer stopped twice for a
    WINDOW_UPDATE: two round trips on every big fetch (0.39 s instead of ~0.15 s at 100 ms
    RTT, docs/benchmarks.md). The client reads the whole answer (up to `total`) anyway, so
    this buffers nothing it would not have read; the grant is returned by the credit rule
    above only as the window's size, never twice."""
    muxed = getattr(stream, "muxed_stream", stream)
    if not isinstance(muxed, YamuxStream):
        return 0
    async with muxed.window_lock:
        extra = min(total, MAX_WINDOW_SIZE) - muxed.target_recv_window
        if extra <= 0:
            return 0
        muxed.target_recv_window += extra
        muxed.recv_window += extra
    # Outside the lock, as py-libp2p does: inbound WINDOW_UPDATE handling takes it too.
    await muxed.send_window_update(extra, skip_lock=True)
    return extra


def install() -> None:
    """Use go-yamux's credit rule for every yamux stream of this process (idempotent)."""
    YamuxStream._auto_tune_and_send_window_update = return_credit_in_half_windows  # type: ignore[method-assign]
