"""VerifyCache: memoized decode / open / encode give exactly what the uncached calls give."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import codec
from protocol.envelope import open_envelope, peer_id_from_seed, seal
from protocol.errors import ProtocolError
from protocol.messages import FetchRequest, RolloutAnnouncement
from swarmp2p.peer_cache import VerifyCache

SEED = hashlib.sha256(b"cache").digest()
PEER = peer_id_from_seed(SEED)


def announcement(round_number: int) -> RolloutAnnouncement:
    return RolloutAnnouncement("s", round_number, 0, PEER, b"\x02" * 32, 4, 900)


def outcome(fn, data):  # type: ignore[no-untyped-def]
    try:
        return ("ok", fn(data))
    except ProtocolError as error:
        return ("error", error.reason)


@given(st.lists(st.one_of(st.integers(0, 5), st.binary(max_size=64)), min_size=1, max_size=20))
def test_cached_outcomes_equal_uncached_ones(items: list[int | bytes]) -> None:
    cache = VerifyCache(max_entries=4, identity_entries=2)  # tiny: evictions happen
    for item in items:
        # valid envelopes (by round) and arbitrary garbage, each sometimes as a fresh copy
        data = seal(announcement(item), SEED) if isinstance(item, int) else item
        for candidate in (data, bytes(bytearray(data))):
            assert outcome(cache.open, candidate) == outcome(open_envelope, candidate)
            assert outcome(cache.decode, candidate) == outcome(codec.decode, candidate)
            assert cache.digest(candidate) == hashlib.sha256(candidate).digest()


def test_a_tighter_cap_applies_even_after_a_cached_success() -> None:
    cache = VerifyCache()
    data = seal(announcement(1), SEED)
    assert cache.open(data).message == announcement(1)
    with pytest.raises(ProtocolError) as raised:
        cache.open(data, max_size=len(data) - 1)
    assert raised.value.reason == "oversized"


def test_mutable_buffers_are_never_remembered_by_identity() -> None:
    cache = VerifyCache()
    buffer = bytearray(seal(announcement(1), SEED))
    assert cache.open(buffer).message.round == 1
    buffer[:] = seal(announcement(2), SEED)  # same object, new content
    assert cache.open(buffer).message.round == 2
    assert cache.digest(buffer) == hashlib.sha256(buffer).digest()


def test_identity_hits_skip_the_work_and_big_items_are_not_kept() -> None:
    cache = VerifyCache(max_item_bytes=64)
    data = seal(announcement(3), SEED)  # larger than 64 bytes: processed, not remembered
    cache.open(data)
    cache.open(data)
    assert cache.misses == 2 and cache.hits == 0
    roomy = VerifyCache()
    first = roomy.open(data)
    assert roomy.open(data) is first and (roomy.misses, roomy.hits) == (1, 1)


def test_encode_is_memoized_per_message() -> None:
    cache = VerifyCache()
    request = FetchRequest(swarm_id="s", round=4, stage=0, peer_id=PEER)
    first = cache.encode(request)
    assert first == codec.encode(request)
    assert cache.encode(FetchRequest(swarm_id="s", round=4, stage=0, peer_id=PEER)) is first
    assert cache.decode(first) == request
