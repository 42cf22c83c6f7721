"""PeersExcept (protocol/peer_sets.py) is frozenset(base) - {me}, without the copy."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.admission import Inbox
from protocol.peer_sets import PeersExcept
from tests.test_admission_rules import make_inbox

names = st.sampled_from([f"p{i}" for i in range(8)])


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
