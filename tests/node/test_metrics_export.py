"""/metrics carries every counter /api/status shows: rejections by reason, the network adapter's
drops, gossip validator rejections, hellos, and the adapter's table sizes, as labeled series."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from prometheus_client.parser import text_string_to_metric_families

from swarmp2p.dashboard import normalize_status, render_metrics
from swarmp2p.dashboard.metrics import PEER_SERIES
from swarmp2p.net import NetworkSettings, open_libp2p_network
from swarmp2p.net.counters import DropCounters
from tests.helpers.metrics import EXPECTED, assert_every_status_counter_exported, numeric_leaves, samples  # noqa: F401


def node_like_status(network_status: Mapping[str, Any]) -> dict[str, Any]:
    """What swarmp2p/node.py serves: the Peer's status plus the network's and the hellos."""
    return {
        "peer_id": "12D3KooWme",
        "round": 4,
        "phase": "collect",
        "peers": ["12D3KooWa"],
        "history": [],
        "counters": {"fetches": 9, "fetch_failed": 2},
        "rejections": {"stale_round": 3, "future_round": 300, "sender_mismatch": 1},
        "banned": [],
        "network": dict(network_status),
        "chain": {"submitted": 7, "failed": 1, "fees": {"max_gwei": 2.5}},
        "hellos": {
            "hellos_accepted": 5,
            "hellos_rejected": 2,
            "hellos_stale": 1,
            "peers_with_other_rules": 1,
        },
    }




def test_every_counter_of_a_real_adapter_status_is_in_metrics() -> None:
    async def main() -> dict[str, Any]:
        with trio.fail_after(30):
            async with open_libp2p_network(create_new_key_pair(), NetworkSettings()) as net:
                net.counters.add("gossip_validator_rejected", 2)
                net.counters.add("dht_foreign_namespace")
                return net.status()

    network_status = trio.run(main)
    # Every kind the adapter declares is in its status, hence in /metrics.
    assert set(DropCounters.KINDS) <= set(network_status["drops"])
    status = node_like_status(network_status)
    assert_every_status_counter_exported(status)
    exported = samples(status)
    assert exported[("swarmp2p_network_drops_total", (("kind", "gossip_validator_rejected"),))] == 2
    assert exported[("swarmp2p_network_drops_total", (("kind", "dht_foreign_namespace"),))] == 1
    assert exported[("swarmp2p_rejections_total", (("reason", "future_round"),))] == 300
    assert exported[("swarmp2p_hellos_total", (("kind", "hellos_stale"),))] == 1
    assert ("swarmp2p_network_known_peers", ()) in exported


def test_labeled_families_exist_even_when_empty_and_never_clash_with_node_counters() -> None:
    status = {"counters": {"rejections": 4, "network_drops_total": 1, "ok": 2}}
    text = render_metrics(normalize_status(status), 0)[0].decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    # A node counter named like a labeled family is left out, never a duplicate family.
    assert families["swarmp2p_rejections"].type == "counter"
    assert families["swarmp2p_rejections"].samples == []
    assert families["swarmp2p_ok"].samples[0].value == 2
    assert "swarmp2p_network_drops" in families


def test_peer_rejections_are_bounded_to_the_most_blamed_peers_and_other() -> None:
    """Under a sybil attack every throwaway key is blamed for something: one series per key
    grew /metrics without bound. Now the 20 most blamed have a series and the rest are summed."""
    blamed = {f"12D3KooWsybil{i:04d}": 1 for i in range(5000)}
    blamed["12D3KooWworst"] = 40
    status = {**node_like_status({}), "peer_rejections": blamed}
    exported = samples(status)
    series = {key[1][0][1]: value for key, value in exported.items() if key[0] == "swarmp2p_peer_rejections"}
    assert len(series) == PEER_SERIES + 1
    assert series["12D3KooWworst"] == 40
    assert series["other"] == 5000 - (PEER_SERIES - 1)
    assert sum(series.values()) == 5040
    assert_every_status_counter_exported(status)
    # No peer blamed yet: the family is there, "other" is 0.
    assert samples(node_like_status({}))[("swarmp2p_peer_rejections", (("peer", "other"),))] == 0
