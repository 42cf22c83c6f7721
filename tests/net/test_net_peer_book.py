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


# ---- forgetting peers that left, and a bounded dial rate -------------------------------------


def _forgetful_book(**kwargs: float) -> PeerBook:
    options = {"forget_after_s": 120.0, "max_dials_per_s": 4.0, "dial_burst": 8} | kwargs
    return PeerBook("me", backoff_initial_s=0.5, backoff_max_s=30.0, max_known=1024, **options)


def _run_dials(book: PeerBook, start_s: float, end_s: float, *, reachable: set[str] = frozenset()) -> list:
    """Upkeep on fake time (a tick every 0.5 s): dial whatever is due; only `reachable` answer."""
    dials = []
    now = start_s
    while now < end_s:
        for peer_id in book.due_for_dial(now, limit=32):
            dials.append((now, peer_id))
            if peer_id in reachable:
                book.mark_connected(peer_id)
            else:
                book.dial_failed(peer_id, now)
        now += 0.5
    return dials


def test_a_peer_unreachable_long_enough_is_forgotten_and_no_longer_dialed() -> None:
    book = _forgetful_book()
    book.learn("gone", ADDR)
    book.mark_connected("gone")
    book.mark_disconnected("gone", now_s=0.0)  # it left the swarm at t=0
    dials = _run_dials(book, 0.0, 3600.0)
    assert "gone" not in book
    assert book.forgotten == 1
    # Backoff 0.5, 1, 2, ... 30 s until 120 s have passed, then never again (an hour: not 120+).
    assert dials and max(t for t, _ in dials) <= 120.0 + 30.0
    assert len(dials) <= 12


def test_bootstrap_peers_are_never_forgotten() -> None:
    book = _forgetful_book()
    book.learn("boot", ADDR, pinned=True)
    dials = _run_dials(book, 0.0, 3600.0)
    assert "boot" in book
    assert max(t for t, _ in dials) >= 3600.0 - 30.0  # still re-dialed at the backoff cap


def test_a_forgotten_peer_comes_back_only_when_heard_of_again() -> None:
    book = _forgetful_book()
    book.learn("gone", ADDR)
    _run_dials(book, 0.0, 600.0)
    assert "gone" not in book
    assert _run_dials(book, 600.0, 1200.0) == []
    assert book.learn("gone", ADDR)  # a peer exchange or hello names it again: new to us
    assert _run_dials(book, 1200.0, 1201.0, reachable={"gone"}) == [(1200.0, "gone")]
    assert book.connected() == ["gone"]


def test_the_forget_clock_restarts_when_the_peer_is_reached() -> None:
    book = _forgetful_book()
    book.learn("flaky", ADDR)
    _run_dials(book, 0.0, 100.0)  # 100 s unreachable: not yet forgotten
    assert "flaky" in book
    book.mark_connected("flaky")
    book.mark_disconnected("flaky", now_s=200.0)
    _run_dials(book, 200.0, 300.0)  # another 100 s down, 200 s in all but not in a row
    assert "flaky" in book
    _run_dials(book, 300.0, 400.0)
    assert "flaky" not in book


def test_dials_are_rate_limited_however_many_peers_are_due() -> None:
    book = _forgetful_book(forget_after_s=10_000.0)
    for i in range(1000):
        book.learn(f"p{i}", ADDR)
    assert len(book.due_for_dial(0.0, limit=1000)) == 8  # the burst
    dials = _run_dials(book, 0.5, 60.5)
    assert len(dials) <= 4.0 * 60 + 1


def test_peers_being_dialed_are_skipped_without_spending_the_dial_budget() -> None:
    book = _forgetful_book(dial_burst=2)
    for name in ("a", "b", "c"):
        book.learn(name, ADDR)
    assert book.due_for_dial(0.0, limit=10, skip={"a", "b"}) == ["c"]
    assert book.due_for_dial(0.0, limit=10, skip={"c"}) == ["a"]  # one token left of two


@given(
    events=st.lists(
        st.tuples(
            st.sampled_from(["tick", "learn", "connect", "disconnect"]),
            st.sampled_from(["a", "b", "boot"]),
            st.floats(0.0, 60.0),
        ),
        max_size=60,
    )
)
def test_only_peers_unreachable_for_the_whole_forget_period_are_forgotten(events: list) -> None:
    book = _forgetful_book(forget_after_s=90.0)
    book.learn("boot", ADDR, pinned=True)
    now = 0.0
    last_reached: dict[str, float] = {}  # when each peer was last connected or learned anew
    for kind, peer, advance in events:
        if kind == "learn":
            if book.learn(peer, ADDR):
                last_reached[peer] = now
        elif kind == "connect" and peer in book:
            book.mark_connected(peer)
            last_reached[peer] = now
        elif kind == "disconnect":
            book.mark_disconnected(peer, now)
        else:
            present = {p for p in ("a", "b") if p in book}
            dials = _run_dials(book, now, now + advance)
            now += advance
            for gone in present - {p for p in ("a", "b") if p in book}:
                assert now - last_reached.get(gone, 0.0) >= 90.0
            assert len(dials) <= 8 + 4.0 * advance + 1
        assert "boot" in book


def test_hearing_of_ourselves_is_not_counted_as_a_full_book() -> None:
    """A Hello or peer exchange naming our own id is ignored, not a `peer_book_full` drop (it was
    counted as one, so a 3-node swarm showed dozens of "full book" drops)."""
    from types import SimpleNamespace

    from swarmp2p.identity import generate_identity
    from swarmp2p.net.adapter import LibP2PNetwork
    from swarmp2p.net.counters import DropCounters

    me, other = generate_identity(), generate_identity()
    fake = SimpleNamespace(
        book=PeerBook(str(me.peer_id), backoff_initial_s=0.5, backoff_max_s=30.0, max_known=8),
        counters=DropCounters(),
    )
    assert not LibP2PNetwork.add_known_peer(fake, str(me.peer_id), ["/ip4/10.0.0.1/tcp/4001"])  # type: ignore[arg-type]
    assert fake.counters.snapshot()["peer_book_full"] == 0
    assert LibP2PNetwork.add_known_peer(fake, str(other.peer_id), ["/ip4/10.0.0.2/tcp/4001"])  # type: ignore[arg-type]
    assert str(other.peer_id) in fake.book
