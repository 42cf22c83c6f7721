"""PeerScores.ban: an immediate ban on signed proof of lying, next to the threshold rule."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.scoring import PeerScores

peers = st.sampled_from(["a", "b", "c"])
reasons = st.sampled_from(["forged_reward", "equivocation", "malformed"])


@given(st.lists(st.tuples(st.sampled_from(["invalid", "ban", "valid"]), peers, reasons), max_size=30))
def test_ban_is_immediate_sticky_and_keeps_the_first_reason(events: list[tuple[str, str, str]]) -> None:
    scores = PeerScores(ban_threshold=3)
    first_reason: dict[str, str] = {}
    invalid: dict[str, int] = {}
    for kind, peer, reason in events:
        was_banned = scores.is_banned(peer)
        if kind == "ban":
            assert scores.ban(peer, reason) is (not was_banned)
        elif kind == "invalid":
            invalid[peer] = invalid.get(peer, 0) + 1
            tipped = scores.record_invalid(peer, reason)
            assert tipped is (not was_banned and invalid[peer] >= 3)
        else:
            scores.record_valid(peer)
        if scores.is_banned(peer) and not was_banned:
            first_reason[peer] = reason
        assert scores.is_banned(peer) or not was_banned  # a ban is never lifted
    assert scores.ban_reasons == first_reason
    assert set(scores.ban_reasons) == scores.banned


def test_one_proof_bans_where_the_threshold_would_wait() -> None:
    scores = PeerScores(ban_threshold=3)
    scores.record_invalid("liar", "malformed")
    assert not scores.is_banned("liar")
    assert scores.ban("liar", "forged_reward")
    assert scores.is_banned("liar") and scores.ban_reasons["liar"] == "forged_reward"
    assert not scores.ban("liar", "equivocation")  # already banned: reason unchanged
    assert scores.ban_reasons["liar"] == "forged_reward"
    assert not scores.is_banned("honest")
