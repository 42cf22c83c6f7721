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


def test_a_big_response_is_written_without_waiting_for_credit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request's stream grants the server credit for the whole response it may send
    (`max_response_bytes`) when it opens, so a 1 MB answer goes out in one go. With yamux's
    256 KiB per stream, the server stopped twice for a WINDOW_UPDATE: two round trips more on
    every 1 MB fetch (at 100 ms RTT, 0.39 s instead of ~0.15 s; docs/benchmarks.md). A small
    request's stream sends no extra frame, and the client's window accounting stays whole."""
    from contextlib import AsyncExitStack

    from swarmp2p.net import NetworkSettings, open_libp2p_network

    waits: list[int] = []  # credit short of the whole answer, per big write (0: none)
    updates: list[int] = []
    original_write = YamuxStream.write
    original_update = YamuxStream.send_window_update

    async def write(self: YamuxStream, data: bytes) -> None:
        # The credit the server holds when it starts writing, less what it must send: on
        # loopback an update comes back before the writer runs dry, across a WAN it does not.
        if len(data) > 100_000:
            waits.append(min(0, self.send_window - len(data)))
        await original_write(self, data)

    async def update(self: YamuxStream, increment: int, skip_lock: bool = False) -> None:
        updates.append(increment)
        await original_update(self, increment, skip_lock)

    monkeypatch.setattr(YamuxStream, "write", write)
    monkeypatch.setattr(YamuxStream, "send_window_update", update)
    payload = bytes(range(256)) * 4000  # 1,024,000 bytes

    async def main() -> None:
        async with AsyncExitStack() as stack:
            opened = open_libp2p_network(create_new_key_pair(), NetworkSettings())
            server = await stack.enter_async_context(opened)

            async def serve(requester: str, data: bytes) -> bytes:
                return payload if data == b"big" else b"small"

            server.set_request_handler(serve)
            settings = NetworkSettings(bootstrap=(server.listen_addrs()[0],))
            client = await stack.enter_async_context(open_libp2p_network(create_new_key_pair(), settings))
            with trio.fail_after(30):
                while server.local_peer_id not in client.connected_peers():
                    await trio.sleep(0.05)
                updates.clear()
                await client.request_hello(server.local_peer_id)  # at most 64 KiB: the default will do
                assert updates == []
                assert await client.request(server.local_peer_id, b"small", 10.0) == b"small"
                for _ in range(3):
                    assert await client.request(server.local_peer_id, b"big", 10.0) == payload
        assert waits == [0, 0, 0]
        # One grant per fetch, up to the largest answer a fetch accepts; nothing returned twice.
        grant = NetworkSettings().max_response_bytes + 1 + 1024 - 256 * 1024
        assert updates.count(grant) == 4, updates

    trio.run(main)
