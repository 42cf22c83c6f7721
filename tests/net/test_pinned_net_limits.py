"""Pinned per-origin limits of inbound gossip (swarmp2p/net/origin_limit.py): the burst cap, the
refill rate, what a refused message costs its bucket and which origin the capped table forgets;
and the gossip read loop's helpers (swarmp2p/net/gossip.py): how many messages unread frames
hold, which signatures are valid, whose stream it is and which buffer is read ahead.

A flooding key must get no more than its burst at once and its rate afterwards, however long it
stayed quiet; an honest key must never be charged for messages that were dropped; and the table
must stay bounded while keeping the buckets of the origins seen most recently. Written against
the survivors of scripts/mutation.sh on that module.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from libp2p.crypto.ed25519 import create_new_key_pair

from swarmp2p.net.gossip import _messages_in_frames, _signature_ok, _stream_peer, _yamux_receive_buffer
from swarmp2p.net.origin_limit import OriginRateLimiter
from tests.helpers.gossip import message, rpc


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_default_bucket_is_a_burst_of_fifty_then_ten_a_second() -> None:
    clock = Clock()
    limiter = OriginRateLimiter(clock=clock)
    assert [limiter.allow(b"k") for _ in range(51)] == [True] * 50 + [False]
    clock.now = 1.0
    assert [limiter.allow(b"k") for _ in range(11)] == [True] * 10 + [False]


def test_the_default_table_holds_16384_origins_before_it_forgets_one() -> None:
    limiter = OriginRateLimiter(clock=Clock())
    for i in range(16384):
        limiter.allow(i.to_bytes(4, "big"))
    assert len(limiter) == 16384 and limiter.evicted == 0
    limiter.allow(b"one more")
    assert len(limiter) == 16384 and limiter.evicted == 1


def test_a_quiet_origin_refills_only_up_to_its_burst_cap() -> None:
    clock = Clock()
    limiter = OriginRateLimiter(rate_per_s=2.0, burst=3, clock=clock)
    assert [limiter.allow(b"k") for _ in range(3)] == [True] * 3
    clock.now = 1000.0  # 2000 tokens' worth of quiet
    assert [limiter.allow(b"k") for _ in range(4)] == [True] * 3 + [False]


def test_a_refused_message_costs_no_token_and_partial_tokens_accumulate() -> None:
    clock = Clock()
    limiter = OriginRateLimiter(rate_per_s=1.0, burst=1, clock=clock)
    assert limiter.allow(b"k")
    clock.now = 0.5
    assert not limiter.allow(b"k")  # half a token: refused, and the half is kept
    clock.now = 1.0
    assert limiter.allow(b"k")  # 0.5 kept + 0.5 refilled
    assert not limiter.allow(b"k")


def test_the_full_table_forgets_the_least_recently_seen_origin() -> None:
    clock = Clock()
    limiter = OriginRateLimiter(rate_per_s=1e-9, burst=1, max_origins=2, clock=clock)
    assert limiter.allow(b"a") and limiter.allow(b"b")
    assert not limiter.allow(b"a")  # seen again: now the most recent, its bucket empty
    assert limiter.allow(b"c")  # the table is full: b, least recently seen, is forgotten
    assert len(limiter) == 2 and limiter.evicted == 1
    assert not limiter.allow(b"a")  # a's empty bucket was kept
    assert limiter.allow(b"b")  # b starts again with a full bucket (and pushes c out)
    assert limiter.evicted == 2


def test_a_table_of_one_origin_and_a_burst_of_one_are_allowed() -> None:
    limiter = OriginRateLimiter(rate_per_s=0.001, burst=1, max_origins=1, clock=Clock())
    assert limiter.allow(b"a") and limiter.allow(b"b")
    assert len(limiter) == 1 and limiter.evicted == 1


@pytest.mark.parametrize(
    "arguments",
    [{"rate_per_s": 0.0}, {"rate_per_s": -1.0}, {"burst": 0.5}, {"max_origins": 0}],
)
def test_a_limiter_that_could_never_allow_anything_is_refused(arguments: dict[str, float]) -> None:
    message = "^" + re.escape("need rate_per_s > 0, burst >= 1 and max_origins >= 1") + "$"
    with pytest.raises(ValueError, match=message):
        OriginRateLimiter(**arguments)  # type: ignore[arg-type]


# ---- what the gossip read loop counts and checks (swarmp2p/net/gossip.py's helpers) ----


def _frame_of(count: int, size: int = 4) -> bytes:
    """One length-prefixed RPC frame carrying `count` published messages of `size` bytes each."""
    return rpc(*[message(KEY, b"m" * size, seqno) for seqno in range(count)])


KEY = create_new_key_pair()


def test_unread_frames_count_their_published_messages() -> None:
    assert _messages_in_frames(b"") == 0
    assert _messages_in_frames(_frame_of(2) + _frame_of(1) + _frame_of(0)) == 3
    # a frame longer than 127 bytes has a two-byte length prefix
    big = _frame_of(3, size=300)
    assert big[1] & 0x80 == 0 and big[0] & 0x80
    assert _messages_in_frames(big + _frame_of(1)) == 4
    # and one of 16 KiB or more a three-byte prefix: each byte's seven bits go 7 further up
    huge = _frame_of(1, size=20_000)
    assert huge[0] & 0x80 and huge[1] & 0x80 and not huge[2] & 0x80
    assert _messages_in_frames(huge + _frame_of(2)) == 3


def test_counting_stops_at_a_frame_cut_short_or_not_an_rpc() -> None:
    whole = _frame_of(2)
    assert _messages_in_frames(whole + _frame_of(5)[:-1]) == 2  # the body is cut short
    assert _messages_in_frames(whole + _frame_of(3, size=300)[:1]) == 2  # the length is cut short
    assert _messages_in_frames(whole + bytes([0x80] * 10) + b"\x01") == 2  # a length of > 10 bytes
    # ...even when the eleventh byte would end it with a length that fits (0: an empty RPC)
    assert _messages_in_frames(whole + bytes([0x80] * 10) + b"\x00" + _frame_of(1)) == 2
    assert _messages_in_frames(whole + b"\x02\xff\xff" + _frame_of(1)) == 2  # not an RPC: stop there


def test_a_message_whose_key_does_not_decode_has_no_valid_signature() -> None:
    signed = message(KEY, b"x", 1, signer=KEY)
    assert _signature_ok(signed)
    forged = message(KEY, b"x", 1, signer=create_new_key_pair())
    assert not _signature_ok(forged)
    # an origin whose id holds no key: the key sent along is used, and it does not decode
    broken = message(KEY, b"x", 1, signer=KEY)
    broken.from_id = b"\x12\x04abcd"
    broken.key = b"\x00not a key"
    assert not _signature_ok(broken)


def test_a_streams_peer_is_named_or_a_question_mark() -> None:
    assert _stream_peer(SimpleNamespace(muxed_conn=SimpleNamespace(peer_id="QmPeer"))) == "QmPeer"
    assert _stream_peer(object()) == "?"


def test_only_a_yamux_streams_own_buffer_is_read_ahead() -> None:
    buffer = bytearray(b"left")
    conn = SimpleNamespace(stream_buffers={7: buffer, 8: b"not a bytearray"})
    assert (
        _yamux_receive_buffer(SimpleNamespace(muxed_stream=SimpleNamespace(conn=conn, stream_id=7))) is buffer
    )
    assert (
        _yamux_receive_buffer(SimpleNamespace(muxed_stream=SimpleNamespace(conn=conn, stream_id=8))) is None
    )
    assert (
        _yamux_receive_buffer(SimpleNamespace(muxed_stream=SimpleNamespace(conn=conn, stream_id=9))) is None
    )
    assert _yamux_receive_buffer(object()) is None
