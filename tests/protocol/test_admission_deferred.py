"""Deferred announcements: a round takes at most `max_top_ups_per_round` of them, and keeping
only that many lowest ones takes exactly what the unbounded store would (protocol/deferred.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.admission import Defer, Fetch
from protocol.decisions import _new_tuple
from protocol.deferred import DeferredStore
from protocol.messages import RolloutAnnouncement
from tests.helpers.inbox import ROUND, announce, batch_envelope, key, make_inbox, pid


def test_a_round_takes_at_most_max_top_ups_per_round_deferred_announcements() -> None:
    inbox = make_inbox(fetch_sample=1, max_top_ups_per_round=2)
    inbox.open_round(ROUND, 0, connected=10_000)  # fetch probability 0.0001: all deferred
    peers = [key(f"p{i}") for i in range(5)]
    for k in peers:
        assert isinstance(inbox.heard(pid(k), announce(k, batch_envelope(k))), Defer)
    assert inbox.current is not None and len(inbox.current.deferred) == 2  # only what can be taken
    first, second = inbox.top_up(ROUND), inbox.top_up(ROUND)
    assert isinstance(first, Fetch) and isinstance(second, Fetch)
    assert inbox.top_up(ROUND) is None  # used up, though three more were announced


def test_top_ups_come_lowest_priority_first_from_the_kept_ones() -> None:
    inbox = make_inbox(fetch_sample=1, max_top_ups_per_round=3)
    inbox.open_round(ROUND, 0, connected=10_000)
    decisions = [
        inbox.heard(pid(k), announce(k, batch_envelope(k))) for k in (key(f"q{i}") for i in range(8))
    ]
    lowest = sorted((d.priority, d.sender) for d in decisions if isinstance(d, Defer))[:3]
    taken = [inbox.top_up(ROUND) for _ in range(3)]
    assert [t.job.sender for t in taken if isinstance(t, Fetch)] == [sender for _, sender in lowest]


def _entry(priority: float, sender: str) -> Defer:
    return _new_tuple(Defer, (priority, RolloutAnnouncement("s", 1, 0, sender, b"\0" * 32, 1, 1)))


@given(
    limit=st.integers(0, 6),
    steps=st.lists(
        st.one_of(st.just(None), st.sampled_from([0.0, 0.25, 0.5, 0.75, 0.9]) | st.floats(0, 1)),
        max_size=40,
    ),
)
def test_the_bounded_store_takes_what_the_unbounded_one_would(limit: int, steps: list[float | None]) -> None:
    """Offers (a priority, for a new sender each; ties on priority included) and takes (None)
    interleaved: up to `limit` takes, the bounded store gives exactly the unbounded store's
    lowest (priority, sender) each time; after that, nothing."""
    store = DeferredStore(limit)
    reference: dict[str, float] = {}
    takes = 0
    for index, step in enumerate(steps):
        if step is not None:
            sender = f"peer{index % 7}-{index}"
            store.offer(_entry(step, sender))
            reference[sender] = step
            assert len(store) <= limit
            # `cutoff`: callers skip `offer` above it, so nothing above it may ever be kept.
            kept = [entry.priority for _, entry in store.items()]
            assert all(priority <= store.cutoff for priority in kept)
            assert not limit or len(kept) < limit or store.cutoff == max(kept)
            continue
        got = store.take()
        if takes >= limit or not reference:
            assert got is None
            continue
        takes += 1
        expected = min(reference, key=lambda peer: (reference[peer], peer))
        assert got is not None and (got.sender, got.priority) == (expected, reference.pop(expected))
