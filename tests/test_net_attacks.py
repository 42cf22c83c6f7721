"""Issue 15's attacks on two running honest Peers over real py-libp2p (tests/attack_kit.py): a
gossip flood from one outside host, DHT-store abuse and hello replay. Each asserts that the two
honest peers still train on each other's rollouts in every round and that the defence's
counters moved (in /api/status and, as Prometheus series, in /metrics)."""

from __future__ import annotations

import time

from swarmp2p.dashboard import normalize_status, render_metrics
from tests.attack_kit import FAST, Pair, run_attacker, run_pair, wait_rounds
from tests.test_metrics_export import assert_every_status_counter_exported


def metric(status: dict, family: str, label: str, key: str) -> float:
    text = render_metrics(normalize_status(status), 0)[0].decode()
    prefix = f'{family}{{{label}="{key}"}} '
    values = [float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix)]
    assert len(values) == 1, (prefix, values)
    return values[0]


def test_a_gossip_flood_from_one_host_loses_no_honest_rollouts() -> None:
    """The attacker process writes gossip as fast as the streams take it for 15 s: announcements
    of 500 throwaway keys (validly signed), junk validly signed by one key, wrongly signed
    messages. Both honest peers must train on each other in every round: before, during and
    after the flood."""
    report: dict = {}

    async def attack(pair: Pair) -> None:
        await wait_rounds(pair, 1)
        report.update(await run_attacker(pair.attacker_args("flood", 15, 500), 15))
        await wait_rounds(pair, 2)

    started = time.monotonic()
    pair = run_pair(attack)
    wall = time.monotonic() - started
    trained = pair.trained()
    print(f"flood test: {wall:.1f} s wall, attacker {report}")
    assert report.get("messages", 0) > 5000, report
    assert len(trained) >= 5, (trained, wall)
    assert pair.rounds_lost() == [], trained
    for index in (0, 1):
        status = pair.snapshots[index]
        drops = status["network"]["drops"]
        # Each defence did its part: the attacker's connection past its allowance dropped and
        # its stream paused (on main: read and checked in full, 3 rounds lost), the one key's
        # junk past its burst dropped unverified, the wrongly signed messages refused at the
        # signature, the validly signed junk by the validator.
        assert drops["gossip_forwarder_rate_limited"] > 0, drops
        assert drops["gossip_forwarder_paused"] > 0, drops
        assert drops["gossip_origin_rate_limited"] > 0, drops
        assert drops["gossip_bad_signature"] > 0, drops
        assert drops["gossip_validator_rejected"] > 0, drops
        # The throwaway keys' announcements were held to the unknown keys' share of fetches.
        assert status["rejections"].get("fetch_unknown_limit", 0) > 0, status["rejections"]
        count = float(drops["gossip_bad_signature"])
        assert metric(status, "swarmp2p_network_drops_total", "kind", "gossip_bad_signature") == count
        assert_every_status_counter_exported(status)


def test_dht_store_abuse_is_bounded_and_counted_and_loses_no_honest_rollouts() -> None:
    """For 12 s the attacker process stores straight at both nodes (PUT_VALUE): validly signed
    ~960 KiB batch records under its own key (rounds now and next, three stages), small
    validly signed records of 200 throwaway keys, records outside our namespace and under
    malformed keys. Each node keeps at most its per-owner caps of any one key, refuses and
    counts the rest, and the honest peers train on each other in every round."""
    report: dict = {}
    held: list[dict[str, tuple[int, int]]] = []
    settings = FAST

    async def attack(pair: Pair) -> None:
        await wait_rounds(pair, 1)
        report.update(await run_attacker(pair.attacker_args("dht", 12, 200), 12))
        for net in pair.nets:
            store = net.dht.value_store
            held.append(
                {owner: (len(keys), store._owner_bytes[owner]) for owner, keys in store._by_owner.items()}
            )
        await wait_rounds(pair, 1)

    started = time.monotonic()
    pair = run_pair(attack, settings=settings)
    print(f"dht test: {time.monotonic() - started:.1f} s wall, attacker {report}")
    trained = pair.trained()
    assert report.get("big", 0) >= 6 and report.get("foreign", 0) >= 3, report
    assert len(trained) >= 4, trained
    assert pair.rounds_lost() == [], trained
    for index in (0, 1):
        per_owner = held[index]
        assert report["owner"] in per_owner, per_owner.keys()  # the attacker's records did arrive...
        for owner, (records, size) in per_owner.items():  # ...and no key holds more than its caps
            assert records <= settings.max_dht_records_per_owner, (owner, records)
            assert size <= settings.max_dht_bytes_per_owner, (owner, size)
        status = pair.snapshots[index]
        drops, tables = status["network"]["drops"], status["network"]["tables"]
        assert tables["dht_record_bytes"] <= settings.max_dht_bytes, tables
        assert drops["dht_evicted_owner_cap"] > 0, drops  # the big records pushed out their elders
        assert drops["dht_foreign_namespace"] > 0, drops
        assert drops["dht_malformed_key"] > 0, drops
        assert drops["dht_rejected"] >= drops["dht_foreign_namespace"] + drops["dht_malformed_key"], drops
        count = float(drops["dht_foreign_namespace"])
        assert metric(status, "swarmp2p_network_drops_total", "kind", "dht_foreign_namespace") == count
        assert_every_status_counter_exported(status)
