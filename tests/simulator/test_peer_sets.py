"""PeersExcept (simulator/fastpath/peer_sets.py) is frozenset(base | joined[:count]) - {me}, without the
copy; SimWorld hands out views that equal the online peers at the time of the ask."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.admission import Inbox
from simulator.fastpath.peer_sets import PeersExcept
from simulator.network import LinkModel, SimWorld
from tests.helpers.inbox import make_inbox

names = st.sampled_from([f"p{i}" for i in range(8)])
PEERS = [f"p{i}" for i in range(8)]


@st.composite
def views(draw: st.DrawFn) -> tuple[PeersExcept, frozenset[str]]:
    """A view with a joined prefix, and the plain set it stands for."""
    base = draw(st.frozensets(names))
    others = draw(st.permutations([p for p in PEERS if p not in base]))
    joined = others[: draw(st.integers(0, len(others)))]
    count = draw(st.integers(0, len(joined)))
    me = draw(names)
    view = PeersExcept(base, me, joined, {p: i for i, p in enumerate(joined)}, count)
    return view, (base | frozenset(joined[:count])) - {me}


@given(view_and_plain=views(), probe=names, target=st.sets(names))
def test_a_view_with_joined_peers_is_the_set_it_stands_for(
    view_and_plain: tuple[PeersExcept, frozenset[str]], probe: str, target: set[str]
) -> None:
    view, plain = view_and_plain
    assert (probe in view) == (probe in plain)
    assert len(view) == len(plain) and set(view) == plain and view == plain
    expected = target | plain
    view.union_into(target)
    assert target == expected


@given(
    events=st.lists(
        st.tuples(st.sampled_from(["attach", "detach", "ask"]), names, st.booleans()), max_size=60
    )
)
def test_the_world_hands_out_the_online_peers_at_the_time_of_the_ask(
    events: list[tuple[str, str, bool]],
) -> None:
    # Views handed out earlier must keep what was online then, whatever happens after.
    world = SimWorld(LinkModel(), seed=1, now_ms=lambda: 0, round_of=lambda ms: 0)
    handed: list[tuple[PeersExcept, frozenset[str]]] = []
    for action, peer, again in events:
        if action == "attach":
            world.attach(peer)
        elif action == "detach":
            world.detach(peer)
        else:
            for _ in range(2 if again else 1):  # a second ask with nothing changed rebuilds
                online = frozenset(p for p, node in world.nodes.items() if node.online)
                handed.append((world.reachable_from(peer), online - {peer}))  # type: ignore[arg-type]
        for view, plain in handed:
            assert set(view) == plain and len(view) == len(plain)
            assert all((p in view) == (p in plain) for p in PEERS)


@given(base=st.frozensets(names), me=names, probe=names)
def test_peers_except_is_the_set_without_me(base: frozenset[str], me: str, probe: str) -> None:
    view, plain = PeersExcept(base, me), base - {me}
    assert (probe in view) == (probe in plain)
    assert len(view) == len(plain) and bool(view) == bool(plain)
    assert set(view) == plain and view == plain and sorted(view) == list(view[:])


@given(base=st.frozensets(names), me=names, target=st.sets(names))
def test_union_into_adds_the_view_and_nothing_else(base: frozenset[str], me: str, target: set[str]) -> None:
    expected = target | (base - {me})
    PeersExcept(base, me).union_into(target)
    assert target == expected  # `me` stays only if the target had it


def test_the_inbox_keeps_a_shared_view_and_copies_anything_else() -> None:
    inbox: Inbox = make_inbox()
    view = PeersExcept(frozenset({"a", "b"}), "a")
    inbox.peers_connected(view)
    assert inbox.connected is view and inbox.established("b") and not inbox.established("a")
    peers = ["a", "b"]
    inbox.peers_connected(peers)
    peers.append("c")  # the caller's list may change: the inbox holds its own copy
    assert inbox.connected == frozenset({"a", "b"})
