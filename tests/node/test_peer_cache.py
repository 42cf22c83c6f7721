"""VerifyCache: memoized decode / open / encode give exactly what the uncached calls give."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import codec
from protocol.envelope import Opened, open_envelope, peer_id_from_seed, seal
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


def test_own_seals_open_from_memory_without_verifying(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = VerifyCache()
    data = seal(announcement(5), SEED)
    opened = open_envelope(data)
    cache.sealed(data, opened)

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a sealed envelope must not be verified again")

    monkeypatch.setattr("swarmp2p.peer_cache.open_envelope", never)
    assert cache.open(data) is opened
    assert cache.open(bytes(bytearray(data))) is opened  # another copy: found by digest
    assert (cache.misses, cache.hits) == (0, 2)
    with pytest.raises(ProtocolError) as raised:  # a receiver's tighter cap still applies
        cache.open(data, max_size=len(data) - 1)
    assert raised.value.reason == "oversized"
    cache.sealed(bytearray(data), opened)  # a mutable buffer is never remembered
    with pytest.raises(AssertionError, match="verified again"):
        VerifyCache().open(data)


def test_what_peers_remember_of_their_own_seals_is_what_opening_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Publisher tells the shared cache what its announcement and batch open to; in a small
    simulation each of those must equal a real open of the bytes."""
    from simulator.runner import run_simulation
    from simulator.scenario import Scenario

    checked: list[str] = []
    remember = VerifyCache.sealed

    def checking(self: VerifyCache, data: bytes, opened: Opened) -> None:
        assert open_envelope(data) == opened
        checked.append(type(opened.message).__name__)
        remember(self, data, opened)

    monkeypatch.setattr(VerifyCache, "sealed", checking)
    run_simulation(Scenario(peers=5, rounds=2, seed=3))
    assert checked.count("RolloutAnnouncement") >= 8 and checked.count("RolloutBatch") >= 8


def test_only_this_process_seals_are_passed_on_as_sealed() -> None:
    """simulator/shards.py: a worker marks the envelopes its own peers sealed, and the receiving
    worker remembers them as opened without checking the signature (as one process does with
    its peers' seals); what it was told by another never counts as its own seal."""
    here, there = VerifyCache(), VerifyCache()
    data = seal(announcement(1), SEED)
    opened = Opened(PEER, announcement(1), hashlib.sha256(data).digest())
    here.sealed(data, opened)
    assert here.sealer_of(data) is None  # a node's cache keeps none of its own past envelopes
    here.track_seals()
    here.sealed(data, opened)
    assert here.sealer_of(data) == PEER
    assert here.sealer_of(bytes(bytearray(data))) is None  # by identity: not a copy from elsewhere
    copy = bytes(bytearray(data))  # what the other worker receives through its pipe
    there.track_seals()
    there.sealed_elsewhere(copy, PEER)
    assert there.sealer_of(copy) is None
    misses = there.misses
    assert there.open(copy) == open_envelope(data)
    assert there.misses == misses  # no signature checked, nothing decoded again


def test_bytes_said_to_be_sealed_elsewhere_that_are_not_an_envelope_are_judged_as_usual() -> None:
    cache = VerifyCache()
    for garbage in (b"\x93\x01\x02\x03", b"not msgpack \xc1", codec.encode(announcement(1))):
        cache.sealed_elsewhere(garbage, PEER)
        assert outcome(cache.open, garbage) == outcome(open_envelope, garbage)


def test_verdicts_go_to_the_other_workers_and_are_taken_from_them() -> None:
    told: list[tuple[bytes, object]] = []
    here, there = VerifyCache(), VerifyCache()
    here.on_verdict = lambda digest, verdict: told.append((digest, verdict))
    assert here.verdict(b"d" * 32, lambda: "ok") == "ok"
    assert here.verdict(b"d" * 32, lambda: "recomputed") == "ok"  # once: a hit is not told again
    assert told == [(b"d" * 32, "ok")]
    there.known_verdict(*told[0])
    assert there.verdict(b"d" * 32, lambda: pytest.fail("recomputed")) == "ok"
    there.known_verdict(b"d" * 32, "other")  # the first one stands
    assert there.verdict(b"d" * 32, lambda: "x") == "ok"
