"""Checks on what a node exports: every counter /api/status shows is a /metrics series."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from swarmp2p.dashboard import normalize_status, render_metrics
from swarmp2p.dashboard.metrics import PEER_SERIES

EXPECTED = {
    ("rejections",): ("swarmp2p_rejections_total", "reason"),
    ("network", "drops"): ("swarmp2p_network_drops_total", "kind"),
    ("network", "gossip_rejections"): ("swarmp2p_gossip_rejections_total", "reason"),
    ("hellos",): ("swarmp2p_hellos_total", "kind"),
    ("network", "tables"): ("swarmp2p_network_table_entries", "table"),
    ("network", "relays"): ("swarmp2p_network_relays", "key"),
}


def samples(status: Mapping[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = render_metrics(normalize_status(status), 0)[0].decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def numeric_leaves(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], float]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from numeric_leaves(value, (*path, str(key)))
    elif isinstance(node, int | float) and not isinstance(node, bool):
        yield path, float(node)


def assert_every_status_counter_exported(status: Mapping[str, Any]) -> None:
    exported = samples(status)
    checked = 0
    blamed = {key[1][0][1]: value for key, value in exported.items() if key[0] == "swarmp2p_peer_rejections"}
    for path, value in numeric_leaves(status):
        if path[0] == "peer_rejections":
            # Its own series if among the most blamed, else part of "other" (checked below).
            assert blamed.get(path[1], value) == value, path
        elif path[:1] == ("counters",):
            name = "swarmp2p_" + path[1] + "_total"
            assert exported[(name, ())] == value, path
        elif path == ("hellos", "peers_with_other_rules"):
            assert exported[("swarmp2p_peers_with_other_rules", ())] == value
        elif path[:-1] in EXPECTED:
            name, label = EXPECTED[path[:-1]]
            assert exported[(name, ((label, path[-1]),))] == value, path
        elif path[0] == "network" and len(path) == 2:
            assert exported[(f"swarmp2p_network_{path[1]}", ())] == value, path
        elif path[0] in ("round",):
            continue
        elif path[0] not in ("counters", "rejections", "network", "hellos"):
            name = f"swarmp2p_status_{path[0]}"
            assert exported[(name, (("key", ".".join(path[1:])),))] == value, path
        else:
            raise AssertionError(f"status number {path} has no place in /metrics")
        checked += 1
    assert checked > 10
    given = [value for path, value in numeric_leaves(status) if path[0] == "peer_rejections"]
    assert len(blamed) <= PEER_SERIES + 1
    assert sum(blamed.values()) == sum(given)


# Where each status section lands in /metrics: (section path, family, label).
