"""The gossip read loop's stream reads ahead (swarmp2p/net/gossip.py `_WatchedStream`).

py-libp2p's read loop takes each RPC's varint length one byte at a time and then its body, each
read through the stream's and yamux's locks. Read ahead, the bytes already received serve those
reads, and nothing else changes: the same bytes in the same order, a short read only where the
stream has no more yet, the end of the stream after the last byte, a paused forwarder not read.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import trio
from hypothesis import given
from hypothesis import strategies as st
from libp2p.utils.varint import encode_varint_prefixed, read_varint_prefixed_bytes_limited

from swarmp2p.net.gossip import READ_AHEAD_BYTES, _WatchedStream


class _ChunkedStream:
    """A stream whose reads return at most what has "arrived": its chunks, one after another,
    never more than asked; b"" at the end. Counts its reads."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = [c for c in chunks if c]
        self.reads = 0

    async def read(self, n: int | None = None) -> bytes:
        self.reads += 1
        if not self._chunks:
            return b""
        head = self._chunks[0]
        if n is None or n < 0 or n >= len(head):
            self._chunks.pop(0)
            return head
        self._chunks[0] = head[n:]
        return head[:n]


class _Pubsub:
    def __init__(self, paused_until: float = 0.0) -> None:
        self.paused_until = paused_until

    def read_paused_until(self, _peer: Any) -> float:
        until, self.paused_until = self.paused_until, 0.0
        return until


def _watched(stream: _ChunkedStream, pubsub: _Pubsub | None = None) -> _WatchedStream:
    watched = _WatchedStream(stream, pubsub or _Pubsub())
    watched._peer_id = "peer"  # type: ignore[assignment]  # as a stream of a real connection
    return watched


def test_rpcs_that_have_arrived_are_read_with_one_stream_read() -> None:
    rpcs = [b"a" * 10_000, b"b" * 3, b"c" * 200]
    stream = _ChunkedStream([b"".join(encode_varint_prefixed(r) for r in rpcs)])
    watched = _watched(stream)

    async def main() -> list[bytes]:
        return [await read_varint_prefixed_bytes_limited(watched, 1 << 20) for _ in rpcs]

    assert trio.run(main) == rpcs
    # Unbuffered: 2 + 1 + 2 varint bytes and 3 bodies, 8 reads of the stream.
    assert stream.reads == 1


def test_a_body_longer_than_the_read_ahead_is_read_whole() -> None:
    rpc = bytes(range(256)) * (3 * READ_AHEAD_BYTES // 256)
    stream = _ChunkedStream([encode_varint_prefixed(rpc)])
    watched = _watched(stream)

    async def main() -> bytes:
        return await read_varint_prefixed_bytes_limited(watched, 1 << 20)

    assert trio.run(main) == rpc


@given(
    data=st.binary(min_size=0, max_size=3 * READ_AHEAD_BYTES // 64),
    cuts=st.lists(st.integers(min_value=0, max_value=3 * READ_AHEAD_BYTES // 64), max_size=8),
    sizes=st.lists(st.one_of(st.none(), st.integers(min_value=-1, max_value=5000)), min_size=1, max_size=40),
)
def test_read_ahead_returns_the_streams_bytes_in_order_and_never_more_than_asked(
    data: bytes, cuts: list[int], sizes: list[int | None]
) -> None:
    bounds = sorted({0, len(data), *(min(c, len(data)) for c in cuts)})
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]
    watched = _watched(_ChunkedStream(chunks))

    async def main() -> None:
        got = b""
        for index in range(200):
            n = sizes[index % len(sizes)]
            piece = await watched.read(n)
            if n is not None and n >= 0:
                assert len(piece) <= n
            if n == 0:
                assert piece == b""
                continue
            if not piece:
                break
            got += piece
        else:
            got += await watched.read(None) + await watched.read(None)
        assert got == data
        assert await watched.read(10) == b""  # and the end stays the end

    trio.run(main)


def test_a_paused_forwarders_buffered_rpcs_wait_for_the_pause_to_end() -> None:
    rpcs = [b"x" * 50, b"y" * 50]
    stream = _ChunkedStream([b"".join(encode_varint_prefixed(r) for r in rpcs)])
    pubsub = _Pubsub()
    watched = _watched(stream, pubsub)

    async def main() -> float:
        assert await read_varint_prefixed_bytes_limited(watched, 1 << 20) == rpcs[0]
        assert stream.reads == 1  # the second RPC is buffered now
        pubsub.paused_until = time.monotonic() + 0.05
        began = time.monotonic()
        assert await read_varint_prefixed_bytes_limited(watched, 1 << 20) == rpcs[1]
        return time.monotonic() - began

    assert trio.run(main) >= 0.05
