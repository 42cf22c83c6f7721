"""Pruning the per-peer tables py-libp2p grows and never shrinks: its peerstore, its
auto-connector's cooldown tables and its resource manager's connection rate buckets.

py-libp2p adds a peer to its peerstore for every connection (identify), every signed peer
record in a gossip RPC, every closer peer a DHT answer names, and removes none: forgetting a
peer cleared its addresses only. Under churn the peerstore grew by one entry per peer ever met
(210 while the book held 9 in a fuzz run), and the auto-connector's table of recent disconnects
with it (its own pruning runs only when it dials, which upkeep does instead). These tables are
py-libp2p 0.8.1's private attributes, each looked up defensively."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable
from typing import Any

from libp2p.abc import IHost
from libp2p.peer.id import ID

from swarmp2p.net.peer_addrs import parse_peer_id
from swarmp2p.net.upkeep import prune_worthwhile, stale_entries

logger = logging.getLogger(__name__)

_COOLDOWN_TABLES = ("_recent_disconnects", "_failure_counts", "_last_connect_attempt")
_RATE_TABLES = ("_token_buckets", "_last_request_times", "_window_counts")


def prune_peer_tables(
    host: IHost, *, known: Iterable[str], dialing: Collection[str], book_size: int, grace_s: float
) -> int:
    """Forget every peer that is not ourselves, `known` (in the peer book), connected or being
    dialed from py-libp2p's peerstore, cooldown tables and rate buckets; returns how many
    peerstore entries went. An entry whose addresses were added less than `grace_s` ago is
    kept: a DHT lookup dials the closer peers it was just told."""
    peerstore = host.get_peerstore()
    entries: dict[ID, Any] | None = getattr(peerstore, "peer_data_map", None)
    if entries is None:
        return 0
    network = host.get_network()
    auto_connector = getattr(network, "auto_connector", None)
    cooldowns: list[dict[ID, Any]] = [
        table for name in _COOLDOWN_TABLES if isinstance(table := getattr(auto_connector, name, None), dict)
    ]
    # The resource manager's per-peer connection rate buckets ("peer:<id>" -> bucket, and
    # when each was last used): py-libp2p forgets one only to make room past 1000.
    limiter = getattr(getattr(network, "_resource_manager", None), "connection_rate_limiter", None)
    buckets: list[dict[str, Any]] = [
        table for name in _RATE_TABLES if isinstance(table := getattr(limiter, name, None), dict)
    ]
    most = book_size + len(network.connections) + len(dialing) + 1
    if not prune_worthwhile((len(entries), *(len(table) for table in (*cooldowns, *buckets))), most):
        return 0
    keep: set[ID] = {host.get_id()}
    keep.update(network.connections)
    for peer_id in (*known, *dialing):
        pid = parse_peer_id(peer_id)
        if pid is not None:
            keep.add(pid)
    last_identified = {pid: getattr(data, "last_identified", 0) for pid, data in entries.items()}
    pruned = 0
    for pid in stale_entries(last_identified, keep, time.time() - grace_s):
        try:
            peerstore.clear_peerdata(pid)
        except Exception as error:
            logger.debug("pruning %s from the peerstore failed: %r", pid, error)
            continue
        pruned += 1
    for table in cooldowns:
        for pid in [pid for pid in table if pid not in keep and pid not in entries]:
            del table[pid]
    if buckets:
        kept = {f"peer:{pid}" for pid in (*entries, *network.connections)}  # after the pruning
        for bucket_table in buckets:
            for key in [key for key in bucket_table if key.startswith("peer:") and key not in kept]:
                del bucket_table[key]
    return pruned
