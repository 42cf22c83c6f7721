"""The rules of connection upkeep, dialing and peer exchange, without IO: plain inputs (which
peers are connected, what the peer book holds, when each peer was last asked) in, decisions
(whom to forget, learn, dial, ask; how long to pause) out. The adapter (adapter.py,
peer_exchange.py) does what they decide on the py-libp2p host; these are tested without sockets
(tests/net/test_net_upkeep_rules.py)."""

from __future__ import annotations

from collections.abc import Collection, Container, Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

import attrs

K = TypeVar("K", bound=Hashable)

# Tells are at least this far apart: a peer that connects and disconnects over and over would
# otherwise have us open a stream to every mesh peer about once a second.
TELL_MIN_GAP_S = 2.0

# How long a peer whose exchange failed is left alone: one without our protocol (a foreign
# libp2p node) rarely, any other soon again.
EXCHANGE_REFUSED_PAUSE_S = 120.0
EXCHANGE_FAILED_PAUSE_S = 5.0


# ---- upkeep ticks ------------------------------------------------------------------------------


@attrs.frozen
class UpkeepPlan:
    """What one upkeep tick does, decided from what it saw."""

    lost: tuple[str, ...]
    """The book holds them as connected, they have no open connection: mark them disconnected,
    take them out of the DHT routing table, drop their closed connections."""
    unknown: tuple[str, ...]
    """Connected but not in the peer book (they dialed us): learn their addresses."""
    unrouted: tuple[str, ...]
    """Connected but not (by us) in the DHT routing table: add them."""
    changed: bool
    """The connected peers differ from the last tick's."""
    missing: int
    """How many more connections `target_peers` wants (dials to start, if any are due)."""
    sweep_store: bool
    """The DHT value store's expiry sweep is due."""


def plan_upkeep(
    *,
    connected: Collection[str],
    book_connected: Iterable[str],
    in_book: Container[str],
    routed: Container[str],
    last_seen: Collection[str],
    target_peers: int,
    now: float,
    next_sweep: float,
) -> UpkeepPlan:
    """One upkeep tick's decisions: `connected` are the peers with an open connection now,
    `book_connected` those the peer book believes connected, `routed` those we added to the
    DHT routing table, `last_seen` the connected peers of the previous tick."""
    ordered = sorted(connected)
    return UpkeepPlan(
        lost=tuple(sorted(p for p in book_connected if p not in connected)),
        unknown=tuple(p for p in ordered if p not in in_book),
        unrouted=tuple(p for p in ordered if p not in routed),
        changed=set(connected) != set(last_seen),
        missing=max(0, target_peers - len(connected)),
        sweep_store=now >= next_sweep,
    )


def _doubled_pause(current_s: float, *, reset: bool, fast_s: float, cap_s: float) -> float:
    """The backoff both background loops use: `fast_s` on `reset`, else double, capped at `cap_s`."""
    if reset:
        return fast_s
    return min(cap_s, max(fast_s, current_s * 2))


def next_upkeep_pause(current_s: float, *, changed: bool, fast_s: float, settled_s: float) -> float:
    """The pause before the next upkeep tick: `fast_s` after a tick that saw a change, else
    double, capped at `settled_s` (never below `fast_s`)."""
    return _doubled_pause(current_s, reset=changed, fast_s=fast_s, cap_s=max(fast_s, settled_s))


# ---- telling mesh peers whom we are connected to -------------------------------------------


def tell_due(*, differs: bool, still_changing: bool, since_last_s: float, max_wait_s: float) -> bool:
    """Whether a node tells its mesh peers whom it is connected to now (upkeep, each tick):
    only if that differs from what it last told them and the last tell is `TELL_MIN_GAP_S`
    old; then once the connections have stopped changing (this tick saw none), or while they
    keep changing once `max_wait_s` has passed since the last tell."""
    if not differs or since_last_s < TELL_MIN_GAP_S:
        return False
    return not still_changing or since_last_s >= max_wait_s


def should_ask_joiner(*, asking: bool, answer_age_s: float | None, quiet_until: float, now: float) -> bool:
    """Whether a peer that just joined our gossip mesh is asked for its neighbours at once: not
    while we are asking it already, not when its answer is younger than `TELL_MIN_GAP_S`
    (None: we have none), not while it is paused after a failed exchange."""
    if asking:
        return False
    if answer_age_s is not None and answer_age_s < TELL_MIN_GAP_S:
        return False
    return quiet_until <= now


# ---- the peer exchange loop ------------------------------------------------------------------


def ended_pauses(quiet_until: Mapping[str, float], now: float) -> list[str]:
    """The peers whose pause after a failed exchange has ended (to forget)."""
    return [peer_id for peer_id, until in quiet_until.items() if until <= now]


def askable(connected: Iterable[str], quiet_until: Mapping[str, float], now: float) -> list[str]:
    """The connected peers not paused after a failed exchange, in a stable (sorted) order."""
    return [p for p in sorted(connected) if quiet_until.get(p, 0.0) <= now]


def exchange_failure_pause(*, refused: bool) -> float:
    """How long a peer whose exchange failed is not asked again (`refused`: it does not serve
    our protocol)."""
    return EXCHANGE_REFUSED_PAUSE_S if refused else EXCHANGE_FAILED_PAUSE_S


def mesh_peer_to_refresh(due_in: Mapping[str, float], askable: Container[str]) -> tuple[str | None, float]:
    """The askable mesh peer whose neighbour list is the most overdue (`due_in` <= 0: the
    seconds until each mesh peer's list falls due, net/neighbours.py), if any; and the seconds
    until the next one falls due (0.0 when one is due now, inf when none will be)."""
    due: tuple[float, str] | None = None
    next_due_s = float("inf")
    for peer_id, left_s in due_in.items():
        if peer_id not in askable:
            continue
        if left_s <= 0:
            if due is None or left_s < due[0]:
                due = (left_s, peer_id)
        else:
            next_due_s = min(next_due_s, left_s)
    if due is None:
        return None, next_due_s
    return due[1], 0.0


def next_exchange_target(askable: Sequence[str], mesh_due: str | None, cursor: int) -> tuple[str | None, int]:
    """Whom the peer exchange loop asks next, and the round-robin cursor after: the overdue
    mesh peer if there is one (the cursor stays), else the next askable peer in turn."""
    if mesh_due is not None:
        return mesh_due, cursor
    if not askable:
        return None, cursor
    cursor = (cursor + 1) % len(askable)
    return askable[cursor], cursor


def next_exchange_interval(
    current_s: float, *, learned: int, connected: int, fast_s: float, slow_s: float
) -> float:
    """The pause before the next peer exchange: back to `fast_s` when the last one taught us a
    new peer or we have no connection, else double, capped at `slow_s`."""
    return _doubled_pause(current_s, reset=learned > 0 or connected == 0, fast_s=fast_s, cap_s=slow_s)


def exchange_loop_pause(interval_s: float, *, fast_s: float, next_refresh_s: float) -> float:
    """The loop's sleep: the backoff paces discovery, but a mesh peer due for a refresh is
    asked on time (never sooner than `fast_s`)."""
    return min(interval_s, max(fast_s, next_refresh_s))


def relays_settled(view: Mapping[str, int], min_mesh_peers: int) -> bool:
    """A relay view (`PeerExchange.relay_view`) in which our relays skip what they should: at
    least `min_mesh_peers` in the mesh, every one's list known, no joiner's exchange in flight,
    and ours told."""
    return (
        view["mesh_peers"] >= min_mesh_peers
        and view["mesh_lists_known"] == view["mesh_peers"]
        and not view["asking"]
        and bool(view["told_current"])
    )


# ---- pruning py-libp2p's peer tables ---------------------------------------------------------


def prune_worthwhile(table_sizes: Iterable[int], most: int) -> bool:
    """Whether any peer table can hold a peer to prune: not while none holds more than `most`
    (the book, our connections, our dials and ourselves together), which keeps a settled
    node's tick cheap."""
    return any(size > most for size in table_sizes)


def stale_entries(last_identified: Mapping[K, float], keep: Container[K], cutoff: float) -> list[K]:
    """The peerstore entries to clear: not kept, and not identified after `cutoff` (a DHT
    lookup dials the closer peers it was just told)."""
    return [pid for pid, seen in last_identified.items() if pid not in keep and seen <= cutoff]


def forgettable_pauses(
    quiet_until: Collection[str], connected: Collection[str], in_book: Container[str]
) -> list[str]:
    """Exchange pauses of peers that are neither connected nor in the book (to forget); none
    while the table is no larger than our connections."""
    if len(quiet_until) <= len(connected):
        return []
    return [p for p in quiet_until if p not in connected and p not in in_book]
