"""Peer scores: counts add up, bans happen at the threshold and never lift."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.scoring import DEFAULT_BAN_THRESHOLD, PeerScores

events = st.lists(
    st.tuples(
        st.sampled_from(["p1", "p2", "p3"]),
        st.one_of(st.none(), st.sampled_from(["forged_reward", "malformed"])),
    ),
    max_size=40,
)


@given(events=events, threshold=st.integers(1, 5))
def test_counts_and_bans(events, threshold):
    scores = PeerScores(ban_threshold=threshold)
    banned_so_far: set[str] = set()
    newly_banned: list[str] = []
    for peer, reason in events:
        if reason is None:
            scores.record_valid(peer)
        elif scores.record_invalid(peer, reason):
            newly_banned.append(peer)
        for earlier in banned_so_far:
            assert scores.is_banned(earlier)  # bans are permanent, valid messages included
        banned_so_far = {p for p in ("p1", "p2", "p3") if scores.is_banned(p)}
    for peer in ("p1", "p2", "p3"):
        invalid = sum(1 for p, r in events if p == peer and r is not None)
        assert scores.invalid[peer] == invalid
        assert scores.valid[peer] == sum(1 for p, r in events if p == peer and r is None)
        assert scores.is_banned(peer) == (invalid >= threshold)
    assert sorted(newly_banned) == sorted(banned_so_far)  # each ban reported exactly once
    assert sum(scores.reasons.values()) == sum(1 for _, r in events if r is not None)
    summary = scores.summary()
    assert set(summary["banned"]) == banned_so_far


def test_default_threshold_is_three():
    scores = PeerScores()
    assert DEFAULT_BAN_THRESHOLD == 3
    assert not scores.record_invalid("p", "x")
    assert not scores.record_invalid("p", "y")
    assert scores.record_invalid("p", "x")
    assert scores.is_banned("p") and not scores.is_banned("q")
    assert scores.reasons_by_peer["p"] == {"x": 2, "y": 1}


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_bad_threshold_is_a_value_error(bad):
    with pytest.raises(ValueError):
        PeerScores(ban_threshold=bad)
