"""The network adapter's tables stay bounded however many origins, records or addresses an
attacker invents, and every refusal and eviction is counted."""

from __future__ import annotations

import os
from typing import Any

import pytest
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.kad_dht.pb.kademlia_pb2 import Record
from libp2p.peer.id import ID
from libp2p.records.utils import InvalidRecordType

from swarmp2p.net.counters import DropCounters
from swarmp2p.net.dht import BoundedValueStore, SwarmRecordValidator, _CountingNamespacedValidator
from swarmp2p.net.peer_book import PeerBook


class FakeHost:
    def __init__(self) -> None:
        self.key_pair = create_new_key_pair()

    def get_id(self) -> ID:
        return ID.from_pubkey(self.key_pair.public_key)

    def get_private_key(self) -> Any:
        return self.key_pair.private_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(key: bytes, value: bytes) -> Record:
    out = Record()
    out.key = key
    out.value = value
    return out


def store(counters: DropCounters, clock: Clock, **caps: Any) -> BoundedValueStore:
    settings = dict(
        ttl_s=60.0,
        max_records=1000,
        max_bytes=1024 * 1024,
        max_records_per_owner=4,
        max_bytes_per_owner=64 * 1024,
    )
    settings.update(caps)
    host = FakeHost()
    return BoundedValueStore(host, host.get_id().to_base58(), counters, clock=clock, **settings)  # type: ignore[arg-type]


def test_dht_store_stays_under_its_caps_for_100k_owners_and_records() -> None:
    counters, clock = DropCounters(), Clock()
    values = store(counters, clock)
    for i in range(100_000):
        values.put_record(f"/swarmp2p/s/{i % 7}/0/owner{i}".encode(), record(b"k", b"x" * 100))
        assert len(values.store) <= 1000
    assert values.total_bytes <= 1024 * 1024
    assert values.owner_count() == len(values.store) <= 1000
    assert counters["dht_evicted_full"] == 100_000 - len(values.store)
    # The internal indexes follow the store exactly (no leak beside it).
    assert sum(values._sizes.values()) == values.total_bytes
    assert len(values._sizes) == len(values._owners) == len(values.store)


def test_one_owner_keeps_only_its_newest_records_and_bytes() -> None:
    counters, clock = DropCounters(), Clock()
    values = store(counters, clock)
    for i in range(100_000):
        values.put_record(f"/swarmp2p/s/{i}/0/sybil".encode(), record(b"k", b"x" * 1000))
    assert len(values.store) == 4  # max_records_per_owner
    assert sorted(values.store)[-1] == b"/swarmp2p/s/99999/0/sybil"
    assert counters["dht_evicted_owner_cap"] == 100_000 - 4
    # A record bigger than one owner may hold is not stored at all, and counted.
    values.put_record(b"/swarmp2p/s/1/0/big", record(b"k", b"x" * (64 * 1024 + 1)))
    assert b"/swarmp2p/s/1/0/big" not in values.store
    # Bytes per owner: 40 KiB records, 64 KiB per owner -> one at a time.
    for i in range(10):
        values.put_record(f"/swarmp2p/s/{i}/0/wide".encode(), record(b"k", b"y" * 40 * 1024))
    assert [k for k in values.store if k.endswith(b"/wide")] == [b"/swarmp2p/s/9/0/wide"]


def test_records_expire_with_their_ttl_and_our_own_survive_a_flood() -> None:
    counters, clock = DropCounters(), Clock()
    values = store(counters, clock, max_records=50)
    own = values.local_owner
    values.put(f"/swarmp2p/s/1/0/{own}".encode(), b"mine")
    for i in range(1000):
        values.put_record(f"/swarmp2p/s/1/0/sybil{i}".encode(), record(b"k", b"junk"))
    assert len(values.store) == 50
    assert values.get(f"/swarmp2p/s/1/0/{own}".encode()).value == b"mine"
    clock.now += 61
    assert values.cleanup_expired() == 50
    assert len(values.store) == 0 and values.total_bytes == 0 and values.owner_count() == 0
    assert counters["dht_expired"] == 50
    # A put after the TTL sweeps what expired without waiting for py-libp2p's hourly loop.
    values.put_record(b"/swarmp2p/s/2/0/a", record(b"k", b"v"))
    clock.now += 61
    values.put_record(b"/swarmp2p/s/3/0/b", record(b"k", b"v"))
    assert list(values.store) == [b"/swarmp2p/s/3/0/b"]


def test_every_kind_of_refused_record_is_counted() -> None:
    counters = DropCounters()
    record_validator = SwarmRecordValidator("swarmp2p", 1024, counters)

    def only_signed(key: str, value: bytes) -> None:
        if not value.startswith(b"signed:"):
            raise ValueError("unsigned")

    record_validator.check = only_signed
    validator = _CountingNamespacedValidator("swarmp2p", record_validator)
    cases = {
        "dht_foreign_namespace": ("/other/key", b"signed:x"),
        "dht_malformed_key": ("/swarmp2p//empty-segment", b"signed:x"),
        "dht_oversized": ("/swarmp2p/s/1/0/p", b"signed:" + b"x" * 1024),
        "dht_malformed_record": ("/swarmp2p/s/1/0/p", b"forged"),
    }
    for kind, (key, value) in cases.items():
        with pytest.raises(InvalidRecordType):
            validator.validate(key, value)
        assert counters[kind] == 1, kind
    for key in ("not-namespaced", "/swarmp2p/" + "x" * 600, "/swarmp2p/s/\x00"):
        with pytest.raises(InvalidRecordType):
            validator.validate(key, b"signed:x")
    assert counters["dht_foreign_namespace"] == 2
    assert counters["dht_malformed_key"] == 3
    assert counters["dht_rejected"] == 7
    validator.validate("/swarmp2p/s/1/0/p", b"signed:fine")
    assert counters["dht_rejected"] == 7


def test_peer_book_stays_under_its_cap_for_100k_advertised_peers() -> None:
    book = PeerBook("me", backoff_initial_s=0.5, backoff_max_s=30, max_known=256)
    book.learn("bootstrap", ("/ip4/10.0.0.1/tcp/1",), pinned=True)
    for i in range(100_000):
        book.learn(f"sybil{i}", (f"/ip4/10.1.{i // 256 % 256}/tcp/{i % 60000 + 1}",))
        assert len(book) <= 256
    assert "bootstrap" in book
    assert book.evicted == 100_000 - 255


def test_a_never_reached_peer_is_forgotten_after_two_failed_dials_a_reached_one_is_not() -> None:
    book = PeerBook(
        "me", backoff_initial_s=0.5, backoff_max_s=30, max_known=64, forget_never_reached_after_s=60.0
    )
    book.learn("sybil", ("/ip4/10.0.0.9/tcp/1",))
    book.learn("friend", ("/ip4/10.0.0.8/tcp/1",))
    book.mark_connected("friend")
    book.mark_disconnected("friend", 0.0)
    assert book.dial_failed("sybil", 0.0) < float("inf")
    assert book.dial_failed("friend", 0.0) < float("inf")
    assert book.dial_failed("sybil", 30.0) < float("inf")  # 2 failures, but not 60 s yet
    assert book.dial_failed("sybil", 61.0) == float("inf")
    assert "sybil" not in book and book.forgotten == 1
    for now in (30.0, 61.0, 120.0):
        book.dial_failed("friend", now)
    assert "friend" in book  # reached once: the 600 s rule applies


def test_gossip_seen_cache_is_capped_and_counts_evictions() -> None:
    from swarmp2p.net.gossip_bounds import CappedSeenCache

    counters = DropCounters()
    cache = CappedSeenCache(120, 60, 1000, counters)
    try:
        for i in range(100_000):
            assert cache.add(i.to_bytes(8, "big"))
            assert len(cache.cache) <= 1000
        assert counters["gossip_seen_cache_evicted"] == 100_000 - 1000
        assert cache.has((99_999).to_bytes(8, "big")) and not cache.has((0).to_bytes(8, "big"))
        assert not cache.add((99_999).to_bytes(8, "big"))  # a duplicate is still a duplicate
    finally:
        cache.stop()


def test_records_expire_with_their_round() -> None:
    from swarmp2p.net.checks import batch_record_round
    from swarmp2p.net.dht import RecordRounds

    counters, clock = DropCounters(), Clock()
    now = [10]
    rounds = RecordRounds(batch_record_round, lambda: now[0], keep_rounds=2, ahead_rounds=1)
    record_validator = SwarmRecordValidator("swarmp2p", 1024, counters)
    record_validator.rounds = rounds
    values = store(counters, clock, ttl_s=3600.0)
    values.rounds = rounds
    for r in (8, 9, 10, 11):
        key = f"/swarmp2p/s/{r}/0/p{r}"
        record_validator.validate(key, b"v")
        values.put_record(key.encode(), record(b"k", b"v"))
    with pytest.raises(InvalidRecordType):
        record_validator.validate("/swarmp2p/s/7/0/old", b"v")
    with pytest.raises(InvalidRecordType):
        record_validator.validate("/swarmp2p/s/12/0/ahead", b"v")
    assert counters["dht_stale_round"] == 1 and counters["dht_future_round"] == 1
    record_validator.validate("/swarmp2p/not-a-batch-key", b"v")  # no round: TTL only
    now[0] = 12  # rounds 8 and 9 are now more than 2 rounds old
    assert values.sweep() == 2
    assert sorted(values.store) == [b"/swarmp2p/s/10/0/p10", b"/swarmp2p/s/11/0/p11"]
    assert counters["dht_expired"] == 2
    now[0] = -1  # before genesis: no round verdicts
    record_validator.validate("/swarmp2p/s/999/0/p", b"v")
    assert batch_record_round("/swarmp2p/s/x/0/p") is None
    assert batch_record_round("/swarmp2p/s/5/0/p") == 5


def test_over_real_libp2p_a_peer_storing_many_records_at_a_node_is_held_to_its_owner_cap() -> None:
    import trio

    from swarmp2p.net import NetworkSettings, open_libp2p_network

    settings = NetworkSettings(
        handler_timeout_s=2.0,
        peer_exchange_interval_s=0.5,
        upkeep_interval_s=0.2,
        max_dht_records_per_owner=5,
    )

    async def main() -> None:
        with trio.fail_after(150):
            async with (
                open_libp2p_network(create_new_key_pair(), settings) as node,
                open_libp2p_network(create_new_key_pair(), settings) as attacker,
            ):
                await attacker.connect(node.listen_addrs()[0])
                with trio.fail_after(20):
                    while attacker.dht.get_routing_table_size() < 1 or node.dht.get_routing_table_size() < 1:
                        await trio.sleep(0.05)
                owner = attacker.local_peer_id
                # Keep storing new records until the node has had to evict one: on a loaded machine
                # some replications time out or fail (counted on the attacker) and never reach the
                # node, so a fixed number of puts did not always pass the cap (2 of 9 runs in CI-like
                # load). The cap must hold however many arrive.
                r = 0
                with trio.fail_after(90):
                    while node.counters["dht_evicted_owner_cap"] == 0:
                        while attacker._replications >= attacker.settings.max_dht_replications:
                            await trio.sleep(0.05)
                        await attacker.dht_put(f"s/{r}/0/{owner}", os.urandom(100 * 1024))
                        r += 1
                        await trio.sleep(0.05)
                    while attacker._replications:
                        await trio.sleep(0.05)
                assert r > 5
                stored = [k for k in node.dht.value_store.store if k.endswith(owner.encode())]
                assert 1 <= len(stored) <= 5
                assert node.counters["dht_evicted_owner_cap"] >= 1
                assert node.status()["tables"]["dht_records"] <= 5
                # The attacker's own store obeys the same cap for its own records.
                assert len(attacker.dht.value_store.store) <= 5

    trio.run(main)
