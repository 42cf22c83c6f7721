"""Rules of the peer book: who to dial, when, and what it refuses to remember."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from swarmp2p.net.peer_book import PeerBook

ADDR = ("/ip4/127.0.0.1/tcp/4001",)


def _book(max_known: int = 100) -> PeerBook:
    return PeerBook("me", backoff_initial_s=0.5, backoff_max_s=30.0, max_known=max_known)


@given(failures=st.integers(min_value=1, max_value=60))
def test_backoff_doubles_and_is_capped(failures: int) -> None:
    book = _book()
    book.learn("p", ADDR)
    delays = [book.dial_failed("p", now_s=0.0) for _ in range(failures)]
    assert delays[0] == 0.5
    assert all(b >= a for a, b in itertools.pairwise(delays))
    assert max(delays) <= 30.0
    assert book.due_for_dial(delays[-1] - 0.01, 10) == []
    assert book.due_for_dial(delays[-1], 10) == ["p"]


def test_success_resets_backoff_and_loss_redials_soon() -> None:
    book = _book()
    book.learn("p", ADDR)
    for _ in range(5):
        book.dial_failed("p", 0.0)
    book.mark_connected("p")
    assert book.due_for_dial(100.0, 10) == []  # connected peers are not dialed
    book.mark_disconnected("p", now_s=100.0)
    assert book.due_for_dial(100.0, 10) == []
    assert book.due_for_dial(100.5, 10) == ["p"]  # initial backoff, not the old 8 s


def test_bootstrap_peers_come_first_and_self_is_never_learned() -> None:
    book = _book()
    assert not book.learn("me", ADDR)
    book.learn("a", ADDR)
    book.learn("b", ADDR)
    book.learn("boot", ADDR, pinned=True)
    book.dial_failed("boot", -10.0)
    assert book.due_for_dial(0.0, 1) == ["boot"]
    assert set(book.due_for_dial(0.0, 10)) == {"a", "b", "boot"}


def test_peer_without_addresses_is_not_learned() -> None:
    book = _book()
    assert not book.learn("p", ())
    assert "p" not in book


@given(
    names=st.lists(st.text(min_size=1, max_size=5), max_size=60), cap=st.integers(min_value=1, max_value=20)
)
def test_book_never_exceeds_its_cap_and_keeps_pinned(names: list[str], cap: int) -> None:
    book = _book(max_known=cap)
    book.learn("boot", ADDR, pinned=True)
    for name in names:
        book.learn(name, ADDR)
        if name != "boot":
            book.dial_failed(name, 0.0)
        assert len(book) <= cap
    assert "boot" in book
