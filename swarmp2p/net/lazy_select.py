"""Open a request stream without waiting on multistream-select: one write carries the
multistream header, the protocol id and the request.

py-libp2p's `host.new_stream` negotiates the protocol lock-step: it writes the header and waits
for the answer (one round trip), then writes the protocol id and waits for its echo (a second
one), and only then may the request go out. Across 100 ms RTT that put every fetch 3.5 RTT
above loopback before any loss (bench/bench_network.py --netns, docs/benchmarks.md). The
listener reads the same bytes in the same order whether they arrive together or not, so the
client may send them at once and read the two answers afterwards, as go-libp2p's lazy client
does; a refusal ("na") still comes back in place of the echo, before any response.
"""

from __future__ import annotations

from typing import Any

import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.protocol_muxer.exceptions import ProtocolNotSupportedError
from libp2p.protocol_muxer.multiselect import MULTISELECT_PROTOCOL_ID
from libp2p.protocol_muxer.multiselect_communicator import MultiselectCommunicator
from libp2p.utils import encode_delim

from swarmp2p.net.yamux_credit import grant_receive_window


class NegotiationFailed(Exception):
    """The remote answered something other than multistream-select's header and our protocol."""


async def open_lazily(
    network: Any, peer_id: ID, protocol: TProtocol, first_message: bytes, *, receive_window: int = 0
) -> Any:
    """A stream to `peer_id` on `protocol` with `first_message` already written, and its receive
    window opened to `receive_window` bytes first (yamux_credit.grant_receive_window: the
    answer, up to that size, then comes without a stop for credit).

    Raises ProtocolNotSupportedError when the remote refuses the protocol, NegotiationFailed on
    any other answer; the stream is reset then. Errors of opening or writing pass through."""
    stream = await network.new_stream(peer_id)
    answered = False
    try:
        if receive_window:
            await grant_receive_window(stream, receive_window)
        header = encode_delim(MULTISELECT_PROTOCOL_ID.encode()) + encode_delim(protocol.encode())
        await stream.write(header + first_message)
        communicator = MultiselectCommunicator(stream)
        if await communicator.read() != MULTISELECT_PROTOCOL_ID:
            raise NegotiationFailed(f"{peer_id} does not speak {MULTISELECT_PROTOCOL_ID}")
        answer = await communicator.read()
        if answer != protocol:
            if answer == "na":
                raise ProtocolNotSupportedError(f"protocols not supported: {protocol}")
            raise NegotiationFailed(f"{peer_id} answered {answer[:80]!r} to {protocol}")
        answered = True
    finally:
        if not answered:
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                try:
                    await stream.reset()
                except Exception:  # already gone: nothing left to release
                    pass
    stream.set_protocol(protocol)
    return stream
