"""Yamux receive credit over a real py-libp2p connection (swarmp2p/net/yamux_credit.py): a reader
returns credit once half its window is read, as go-yamux does, never more than it read, and big
transfers still complete."""

from __future__ import annotations

import multiaddr
import pytest
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.stream_muxer.yamux.yamux import YamuxStream

from swarmp2p.net import yamux_credit

PROTOCOL = "/swarmp2p/test/credit/1.0.0"


async def _transfer(chunks: list[int], monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """Write `chunks` (sizes) one at a time over one stream, each written only after the reader
    has read the one before (so each is a read of its own). Returns the reader's WINDOW_UPDATE
    increments and, after each read, its over-credit: recv_window + buffered - target (>0 means
    the writer was granted more than the window)."""
    increments: list[int] = []
    over_credit: list[int] = []
    reader_streams: list[YamuxStream] = []
    original = YamuxStream.send_window_update

    async def counting(self: YamuxStream, increment: int, skip_lock: bool = False) -> None:
        if self in reader_streams:
            increments.append(increment)
        await original(self, increment, skip_lock)

    monkeypatch.setattr(YamuxStream, "send_window_update", counting)
    progress_send, progress_receive = trio.open_memory_channel[int](len(chunks) + 1)
    total = sum(chunks)

    async def handler(stream) -> None:  # type: ignore[no-untyped-def]
        muxed = stream.muxed_stream
        reader_streams.append(muxed)
        got = 0
        while got < total:
            data = await stream.read()
            got += len(data)
            buffered = len(muxed.conn.stream_buffers.get(muxed.stream_id, b""))
            over_credit.append(muxed.recv_window + buffered - muxed.target_recv_window)
            await progress_send.send(got)
        await stream.close()

    listen = [multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]
    reader, writer = new_host(key_pair=create_new_key_pair()), new_host(key_pair=create_new_key_pair())
    with trio.fail_after(60):
        async with reader.run(listen_addrs=listen), writer.run(listen_addrs=listen):
            reader.set_stream_handler(PROTOCOL, handler)
            address = f"{reader.get_addrs()[0]}"
            await writer.connect(info_from_p2p_addr(multiaddr.Multiaddr(address)))
            stream = await writer.new_stream(reader.get_id(), [PROTOCOL])
            written = 0
            for size in chunks:
                await stream.write(b"x" * size)
                written += size
                while (await progress_receive.receive()) < written:
                    pass
            await stream.close()
    return increments, over_credit


def test_small_reads_return_no_credit_until_half_the_window_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """40 reads of 100 bytes: 4 KB of a 256 KiB window, so go-yamux's rule sends no update.
    py-libp2p 0.8.1's own rule (even with PY_YAMUX_RELEASE_ON_READ=0) sent one every other read
    and granted twice what was read."""
    yamux_credit.install()
    increments, over_credit = trio.run(_transfer, [100] * 40, monkeypatch)
    assert increments == []
    assert max(over_credit) <= 0


def test_a_megabyte_in_small_writes_returns_credit_in_half_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """1 MiB in 256 writes of 4 KiB, each read on its own: it completes, with one update per
    half window read (the window may grow, go-yamux's auto-tuning) instead of one per read or two."""
    yamux_credit.install()
    increments, over_credit = trio.run(_transfer, [4096] * 256, monkeypatch)
    assert 1 <= len(increments) <= (1 << 20) // (128 * 1024)
    assert max(over_credit) <= 0


def test_install_is_idempotent_and_replaces_py_libp2p_s_rule() -> None:
    yamux_credit.install()
    yamux_credit.install()
    assert YamuxStream._auto_tune_and_send_window_update is yamux_credit.return_credit_in_half_windows
