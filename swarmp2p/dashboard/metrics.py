"""`/metrics`: Prometheus text computed from one status snapshot at scrape time."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from swarmp2p.dashboard.status import is_number as _is_number


def _metric_name(name: str) -> str:
    cleaned = re.sub(r"[^a-zA-Z0-9_]", "_", name).strip("_").lower() or "unnamed"
    if cleaned[0].isdigit():
        cleaned = "_" + cleaned
    return f"swarmp2p_{cleaned}"


def render_metrics(status: Mapping[str, Any] | None, source_errors: int) -> tuple[bytes, str]:
    """Prometheus exposition text for one status snapshot (None: the source failed)."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

    families: list[Any] = []
    errors = CounterMetricFamily(
        "swarmp2p_dashboard_source_errors", "Times the status source failed to answer the dashboard."
    )
    errors.add_metric([], source_errors)
    families.append(errors)
    up = GaugeMetricFamily("swarmp2p_status_up", "1 if the status source answered this scrape, else 0.")
    up.add_metric([], 0 if status is None else 1)
    families.append(up)

    if status is not None:
        info = InfoMetricFamily("swarmp2p_node", "Identity and phase of the node.")
        # The node's phase as /healthz says it (starting ... evaluating, playing); a status
        # without one (the simulator's) gives its round phase.
        phase = status.get("node_phase") or status.get("phase") or ""
        info.add_metric([], {"peer_id": str(status.get("peer_id") or ""), "phase": str(phase)})
        families.append(info)
        gauges = {
            "swarmp2p_round": ("Current round.", status.get("round")),
            "swarmp2p_peers": ("Connected peers.", status.get("peer_count")),
        }
        history = status.get("history") or []
        last = history[-1] if history else {}
        gauges["swarmp2p_last_round_reward"] = (
            "Mean reward of the latest finished round.",
            last.get("reward"),
        )
        # Served from a published snapshot (swarmp2p/dashboard/snapshot.py): how old it is; one
        # that keeps growing means the node's loop is stuck.
        gauges["swarmp2p_status_age_seconds"] = (
            "Seconds since the node built the status this scrape reports.",
            status.get("status_age_s"),
        )
        for name, (help_text, value) in gauges.items():
            if _is_number(value):
                gauge = GaugeMetricFamily(name, help_text)
                gauge.add_metric([], float(value))
                families.append(gauge)
        families.extend(_eval_metrics(status))
        # The labeled families' names are taken first: a node counter that sanitises to one of
        # them is left out rather than clash with it.
        seen = {"swarmp2p_dashboard_source_errors", *_LABELED_NAMES}
        for key, value in sorted(status.get("counters", {}).items()):
            name = _metric_name(key)
            if name.endswith("_total"):
                name = name[: -len("_total")]
            if name in seen or value < 0:
                continue  # two keys that sanitise alike, or a value no counter can have
            seen.add(name)
            counter = CounterMetricFamily(name, f"Node counter '{key}'.")
            counter.add_metric([], float(value))
            families.append(counter)
        families.extend(_labeled_metrics(status))
        families.append(_peer_rejections(status))

    class _Snapshot:
        def collect(self) -> Any:
            return iter(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot())
    return generate_latest(registry), CONTENT_TYPE_LATEST


# Status sections whose numbers are counters (they only grow), exported as ONE labeled family
# each: (path in the status, metric name without `_total`, label name, help text). Everything
# `/api/status` counts is here, so a scrape sees every rejection, drop and hello the page shows.
_LABELED_COUNTERS: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (("rejections",), "swarmp2p_rejections", "reason", "Inbound messages the node rejected, by reason."),
    (
        ("network", "drops"),
        "swarmp2p_network_drops",
        "kind",
        "What the libp2p adapter dropped, refused or evicted, by kind.",
    ),
    (
        ("network", "gossip_rejections"),
        "swarmp2p_gossip_rejections",
        "reason",
        "Gossip messages our topic validators rejected (not delivered, not forwarded), by reason.",
    ),
    (("hellos",), "swarmp2p_hellos", "kind", "Hellos received, by outcome."),
)
# Status sections whose numbers are levels (they go up and down): one gauge family each.
_LABELED_GAUGES: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (
        ("network", "tables"),
        "swarmp2p_network_table_entries",
        "table",
        "Entries in the libp2p adapter's bounded tables (peer book, DHT store, ...).",
    ),
    (
        ("network", "relays"),
        "swarmp2p_network_relays",
        "key",
        "Gossip mesh peers, how many told us their connections, exchanges in flight, ours told "
        "(LibP2PNetwork.relay_view): relays skip peers holding the author's copy once all are known.",
    ),
)
# Numbers shown in /api/status that are not counts of events (hellos' peers_with_other_rules is
# how many peers differ, now): exported as gauges under these names.
_GAUGE_KEYS = {("hellos", "peers_with_other_rules"): "swarmp2p_peers_with_other_rules"}
_NETWORK_GAUGES = {
    "connected_peers": "Peers with an open libp2p connection.",
    "known_peers": "Peers in the peer book.",
    "dht_routing_table": "Peers in the Kademlia routing table.",
}
_LABELED_NAMES = frozenset(
    [name for _, name, _, _ in _LABELED_COUNTERS + _LABELED_GAUGES]
    + list(_GAUGE_KEYS.values())
    + [f"swarmp2p_network_{key}" for key in _NETWORK_GAUGES]
    + ["swarmp2p_peer_rejections"]
)


def _section(status: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any]:
    node: Any = status
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def _labeled_metrics(status: Mapping[str, Any]) -> list[Any]:
    """Counters and gauges of the status sections above, with a label per key."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    families: list[Any] = []
    for path, name, label, help_text in _LABELED_COUNTERS:
        counter = CounterMetricFamily(name, help_text, labels=[label])
        for key, value in sorted(_section(status, path).items()):
            if (*path, key) in _GAUGE_KEYS or not _is_number(value) or value < 0:
                continue
            counter.add_metric([str(key)], float(value))
        families.append(counter)  # present even when empty: a dashboard sees the family exists
    for path, name, label, help_text in _LABELED_GAUGES:
        gauge = GaugeMetricFamily(name, help_text, labels=[label])
        for key, value in sorted(_section(status, path).items()):
            if _is_number(value):
                gauge.add_metric([str(key)], float(value))
        if gauge.samples:
            families.append(gauge)
    for (*path, key), name in _GAUGE_KEYS.items():
        value = _section(status, tuple(path)).get(key)
        if _is_number(value):
            gauge = GaugeMetricFamily(name, f"Status value {'.'.join((*path, key))}.")
            gauge.add_metric([], float(value))
            families.append(gauge)
    network = _section(status, ("network",))
    for key, help_text in _NETWORK_GAUGES.items():
        if _is_number(network.get(key)):
            gauge = GaugeMetricFamily(f"swarmp2p_network_{key}", help_text)
            gauge.add_metric([], float(network[key]))
            families.append(gauge)
    # Any other section of numbers (e.g. a chain coordinator's "chain"): one gauge family per
    # section, a label per (dotted) key, so nothing /api/status counts is missing here.
    for section, value in sorted(status.items()):
        if section in _SECTIONS_EXPORTED or not isinstance(value, Mapping):
            continue
        leaves = sorted(_numeric_leaves(value))
        if leaves:
            gauge = GaugeMetricFamily(
                f"{_metric_name('status_' + section)}",
                f"Numbers of the status section '{section}'.",
                labels=["key"],
            )
            for key, number in leaves:
                gauge.add_metric([key], number)
            families.append(gauge)
    return families


PEER_SERIES = 20
"""`peer_rejections` (messages blamed on each peer) gets a series for at most this many peers,
the most blamed; the others are summed under peer="other". One series per peer key let a sybil
attack add a series to every scrape per throwaway key."""


def _peer_rejections(status: Mapping[str, Any]) -> Any:
    """A gauge, not a counter: which peers are in the top set moves, so "other" can fall."""
    from prometheus_client.core import GaugeMetricFamily

    counts = {
        str(peer): float(value)
        for peer, value in _section(status, ("peer_rejections",)).items()
        if _is_number(value) and value >= 0
    }
    gauge = GaugeMetricFamily(
        "swarmp2p_peer_rejections",
        f"Messages blamed on each peer: the {PEER_SERIES} most blamed by id, the rest summed as 'other'.",
        labels=["peer"],
    )
    top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:PEER_SERIES]
    for peer, value in top:
        gauge.add_metric([peer], value)
    gauge.add_metric(["other"], sum(counts.values()) - sum(value for _, value in top))
    return gauge


# Top-level status keys exported above (or on purpose not: the schedule is configuration).
_SECTIONS_EXPORTED = frozenset(
    {
        "counters",
        "rejections",
        "network",
        "hellos",
        "eval",
        "eval_history",
        "eval_deferred",
        "history",
        "schedule",
        "peer_rejections",
    }
)


def _numeric_leaves(node: Mapping[str, Any], prefix: str = "", depth: int = 0) -> list[tuple[str, float]]:
    leaves: list[tuple[str, float]] = []
    for key, value in node.items():
        name = f"{prefix}{key}"
        if _is_number(value):
            leaves.append((name, float(value)))
        elif isinstance(value, Mapping) and depth < 2:
            leaves.extend(_numeric_leaves(value, name + ".", depth + 1))
    return leaves


def _eval_metrics(status: Mapping[str, Any]) -> list[Any]:
    """Gauges of the latest held-out evaluation: overall and per task (label `task`)."""
    from prometheus_client.core import GaugeMetricFamily

    result = status.get("eval")
    if not isinstance(result, Mapping):
        return []
    families: list[Any] = []
    overall = {
        "swarmp2p_eval_accuracy": (
            "Held-out accuracy of the latest evaluation (correct answers over all its questions).",
            "accuracy",
        ),
        "swarmp2p_eval_task_mean_accuracy": (
            "Held-out accuracy of the latest evaluation, the mean over its tasks.",
            "task_mean_accuracy",
        ),
        "swarmp2p_eval_reward": ("Held-out mean reward of the latest evaluation.", "reward"),
        "swarmp2p_eval_step": ("Training step the latest held-out evaluation measured.", "step"),
        "swarmp2p_eval_seconds": ("Duration of the latest held-out evaluation.", "seconds"),
    }
    for name, (help_text, key) in overall.items():
        if _is_number(result.get(key)):
            gauge = GaugeMetricFamily(name, help_text)
            gauge.add_metric([], float(result[key]))
            families.append(gauge)
    per_task = result.get("per_task")
    if isinstance(per_task, Mapping):
        for key in ("accuracy", "reward"):
            gauge = GaugeMetricFamily(
                f"swarmp2p_eval_task_{key}",
                f"Held-out {key} of the latest evaluation, per task.",
                labels=["task"],
            )
            for task, stats in sorted(per_task.items()):
                if isinstance(stats, Mapping) and _is_number(stats.get(key)):
                    gauge.add_metric([str(task)], float(stats[key]))
            if gauge.samples:
                families.append(gauge)
    return families
