"""The rules of upkeep, dialing and peer exchange (swarmp2p/net/upkeep.py), without sockets:
plain inputs in, decisions out."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from swarmp2p.net.upkeep import (
    EXCHANGE_FAILED_PAUSE_S,
    EXCHANGE_REFUSED_PAUSE_S,
    TELL_MIN_GAP_S,
    askable,
    ended_pauses,
    exchange_failure_pause,
    exchange_loop_pause,
    forgettable_pauses,
    mesh_peer_to_refresh,
    next_exchange_target,
    plan_upkeep,
    prune_worthwhile,
    relays_settled,
    should_ask_joiner,
    stale_entries,
)

PEERS = st.sampled_from([f"peer{i}" for i in range(12)])
PEER_SETS = st.frozensets(PEERS, max_size=12)


@given(
    connected=PEER_SETS,
    book_connected=PEER_SETS,
    in_book=PEER_SETS,
    routed=PEER_SETS,
    last_seen=PEER_SETS,
    target=st.integers(0, 16),
    now=st.floats(0, 1000),
    next_sweep=st.floats(0, 1000),
)
def test_an_upkeep_plan_forgets_the_lost_learns_the_unknown_and_dials_what_is_missing(
    connected: frozenset[str],
    book_connected: frozenset[str],
    in_book: frozenset[str],
    routed: frozenset[str],
    last_seen: frozenset[str],
    target: int,
    now: float,
    next_sweep: float,
) -> None:
    plan = plan_upkeep(
        connected=connected,
        book_connected=book_connected,
        in_book=in_book,
        routed=routed,
        last_seen=last_seen,
        target_peers=target,
        now=now,
        next_sweep=next_sweep,
    )
    # Lost: believed connected by the book, with no open connection; never a connected peer.
    assert set(plan.lost) == book_connected - connected
    # Every connected peer the book lacks is learned, every one not routed is added to the DHT.
    assert set(plan.unknown) == connected - in_book
    assert set(plan.unrouted) == connected - routed
    assert plan.changed == (connected != last_seen)
    assert plan.missing == max(0, target - len(connected))
    assert plan.sweep_store == (now >= next_sweep)
    # Stable orders: the same inputs give the same plan.
    assert list(plan.unknown) == sorted(plan.unknown) and list(plan.lost) == sorted(plan.lost)


def test_a_settled_tick_decides_nothing() -> None:
    """All connected peers known, routed and seen last tick, the target met: nothing to do."""
    peers = {"a", "b", "c"}
    plan = plan_upkeep(
        connected=peers,
        book_connected=peers,
        in_book=peers,
        routed=peers,
        last_seen=peers,
        target_peers=3,
        now=5.0,
        next_sweep=10.0,
    )
    assert (plan.lost, plan.unknown, plan.unrouted, plan.changed, plan.missing, plan.sweep_store) == (
        (),
        (),
        (),
        False,
        0,
        False,
    )


def test_a_lost_peer_and_a_stranger_who_dialed_us_change_the_plan() -> None:
    plan = plan_upkeep(
        connected={"a", "stranger"},
        book_connected=["a", "gone"],
        in_book={"a", "gone"},
        routed={"a", "gone"},
        last_seen={"a", "gone"},
        target_peers=4,
        now=0.0,
        next_sweep=0.0,
    )
    assert plan.lost == ("gone",)
    assert plan.unknown == ("stranger",)
    assert plan.unrouted == ("stranger",)
    assert plan.changed
    assert plan.missing == 2


@given(
    asking=st.booleans(),
    age=st.none() | st.floats(0, 100),
    quiet_until=st.floats(0, 100),
    now=st.floats(0, 100),
)
def test_a_mesh_joiner_is_asked_unless_asked_already_told_lately_or_paused(
    asking: bool, age: float | None, quiet_until: float, now: float
) -> None:
    ask = should_ask_joiner(asking=asking, answer_age_s=age, quiet_until=quiet_until, now=now)
    fresh = age is not None and age < TELL_MIN_GAP_S
    assert ask == (not asking and not fresh and quiet_until <= now)


def test_the_most_overdue_askable_mesh_peer_is_refreshed_first() -> None:
    due_in = {"a": -1.0, "b": -5.0, "c": 3.0, "d": -9.0}
    # d is the most overdue but not askable (paused or not connected): b goes first.
    assert mesh_peer_to_refresh(due_in, {"a", "b", "c"}) == ("b", 0.0)
    # None due among the askable: the next falls due in 3 s.
    assert mesh_peer_to_refresh(due_in, {"c"}) == (None, 3.0)
    assert mesh_peer_to_refresh({}, {"a"}) == (None, math.inf)
    assert mesh_peer_to_refresh(due_in, set()) == (None, math.inf)


@given(st.dictionaries(PEERS, st.floats(-100, 100)), PEER_SETS)
def test_a_mesh_refresh_picks_a_due_askable_peer_or_says_when_the_next_falls_due(
    due_in: dict[str, float], askable_peers: frozenset[str]
) -> None:
    chosen, next_s = mesh_peer_to_refresh(due_in, askable_peers)
    candidates = {p: s for p, s in due_in.items() if p in askable_peers}
    if chosen is None:
        assert all(s > 0 for s in candidates.values())
        assert next_s == min(candidates.values(), default=math.inf)
    else:
        assert next_s == 0.0
        assert candidates[chosen] == min(candidates.values()) <= 0


def test_the_exchange_loop_asks_an_overdue_mesh_peer_else_round_robin() -> None:
    peers = ["a", "b", "c"]
    assert next_exchange_target(peers, "c", 0) == ("c", 0)  # the cursor waits
    asked = []
    cursor = 0
    for _ in range(6):
        target, cursor = next_exchange_target(peers, None, cursor)
        asked.append(target)
    assert asked == ["b", "c", "a", "b", "c", "a"]  # everyone in turn
    assert next_exchange_target([], None, 4) == (None, 4)


@given(st.lists(PEERS, max_size=12), st.integers(0, 100))
def test_round_robin_stays_in_range_whatever_the_peers_did(peers: list[str], cursor: int) -> None:
    target, after = next_exchange_target(peers, None, cursor)
    if peers:
        assert 0 <= after < len(peers) and target == peers[after]
    else:
        assert target is None


def test_paused_peers_are_not_asked_until_their_pause_ends() -> None:
    quiet = {"a": 10.0, "b": 3.0}
    assert askable(["c", "b", "a"], quiet, now=5.0) == ["b", "c"]  # sorted, a still paused
    assert ended_pauses(quiet, now=5.0) == ["b"]
    assert askable(["a"], quiet, now=10.0) == ["a"]
    assert exchange_failure_pause(refused=True) == EXCHANGE_REFUSED_PAUSE_S
    assert exchange_failure_pause(refused=False) == EXCHANGE_FAILED_PAUSE_S < EXCHANGE_REFUSED_PAUSE_S


@given(st.floats(0.1, 100), st.floats(0.1, 10), st.floats(0, 100) | st.just(math.inf))
def test_the_exchange_loop_sleeps_its_backoff_but_wakes_for_a_due_refresh(
    interval_s: float, fast_s: float, next_refresh_s: float
) -> None:
    pause = exchange_loop_pause(interval_s, fast_s=fast_s, next_refresh_s=next_refresh_s)
    assert pause <= interval_s
    assert pause >= min(interval_s, fast_s)  # never spins faster than the fast pace
    if next_refresh_s >= interval_s:
        assert pause == interval_s


def test_relays_are_settled_only_when_every_mesh_list_is_known_and_ours_told() -> None:
    settled = {"mesh_peers": 3, "mesh_lists_known": 3, "asking": 0, "told_current": 1}
    assert relays_settled(settled, 3)
    assert not relays_settled(settled, 4)
    assert not relays_settled({**settled, "mesh_lists_known": 2}, 3)
    assert not relays_settled({**settled, "asking": 1}, 3)
    assert not relays_settled({**settled, "told_current": 0}, 3)


def test_tables_are_pruned_only_past_what_the_book_and_connections_hold() -> None:
    assert not prune_worthwhile([3, 5, 0], most=5)
    assert prune_worthwhile([3, 6, 0], most=5)
    assert not prune_worthwhile([], most=0)


@given(st.dictionaries(PEERS, st.floats(0, 100)), PEER_SETS, st.floats(0, 100))
def test_a_peerstore_entry_goes_only_if_not_kept_and_not_identified_lately(
    last_identified: dict[str, float], keep: frozenset[str], cutoff: float
) -> None:
    stale = set(stale_entries(last_identified, keep, cutoff))
    for peer, seen in last_identified.items():
        assert (peer in stale) == (peer not in keep and seen <= cutoff)


def test_exchange_pauses_of_strangers_are_forgotten_once_they_outnumber_connections() -> None:
    quiet = ["a", "b", "c"]
    # No more pauses than connections: nothing to do (cheap on a settled node).
    assert forgettable_pauses(quiet, connected={"x", "y", "z"}, in_book=set()) == []
    # More: those neither connected nor in the book go.
    assert forgettable_pauses(quiet, connected={"a"}, in_book={"b"}) == ["c"]
