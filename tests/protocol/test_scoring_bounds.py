"""PeerScores stays bounded under churn of fresh keys: a peer that falls silent is forgotten after
`forget_after_rounds` (no strikes) or `ban_rounds` (strikes or a ban), while everything about a
peer heard from more recently is kept exactly, and a ban lasts its full `ban_rounds`."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.scoring import PeerScores

FORGET, BAN_ROUNDS, THRESHOLD = 3, 7, 2

# One event per step: advance the round, or a message from one of a few peers (small ids make
# peers recur; large ones stand for fresh keys).
events = st.lists(
    st.one_of(
        st.tuples(st.just("round"), st.integers(1, 4)),
        st.tuples(st.sampled_from(["valid", "invalid", "ban"]), st.integers(0, 30)),
    ),
    max_size=80,
)


def _tables(scores: PeerScores) -> set[str]:
    return (
        set(scores.valid)
        | set(scores.invalid)
        | set(scores.reasons_by_peer)
        | scores.banned
        | set(scores.ban_reasons)
    )


@settings(max_examples=300, deadline=None)
@given(events)
def test_silent_peers_are_forgotten_and_recent_ones_kept_exactly(steps: list[tuple[str, int]]) -> None:
    scores = PeerScores(ban_threshold=THRESHOLD, forget_after_rounds=FORGET, ban_rounds=BAN_ROUNDS)
    now = 0
    scores.new_round(now)
    # A model of what must be remembered: per peer its last round heard, counts and ban round.
    last: dict[str, int] = {}
    valid: Counter[str] = Counter()
    invalid: Counter[str] = Counter()
    banned_at: dict[str, int] = {}
    for kind, value in steps:
        if kind == "round":
            now += value
            scores.new_round(now)
            for peer in [p for p, heard in last.items() if now - heard >= _keep(p, invalid, banned_at)]:
                del last[peer]
                valid.pop(peer, None)
                invalid.pop(peer, None)
                banned_at.pop(peer, None)
        else:
            peer = f"peer-{value}"
            last[peer] = now
            if kind == "valid":
                scores.record_valid(peer)
                valid[peer] += 1
            elif kind == "invalid":
                scores.record_invalid(peer, "bad_signature")
                invalid[peer] += 1
                if invalid[peer] >= THRESHOLD:
                    banned_at.setdefault(peer, now)
            else:
                scores.ban(peer, "forged_reward")
                banned_at.setdefault(peer, now)
        assert _tables(scores) <= set(last), "a silent peer is still in the table"
        for peer in last:
            assert scores.valid[peer] == valid[peer] and scores.invalid[peer] == invalid[peer], peer
            assert scores.is_banned(peer) == (peer in banned_at), peer
        assert sum(scores.reasons.values()) >= sum(invalid.values())


def _keep(peer: str, invalid: Counter[str], banned_at: dict[str, int]) -> int:
    return BAN_ROUNDS if invalid[peer] or peer in banned_at else FORGET


@given(st.integers(10, 500))
def test_the_table_of_fresh_keys_holds_only_the_last_window(fresh_per_round: int) -> None:
    """Every round `fresh_per_round` new keys each send one valid message: the table holds at
    most the keys of the last `forget_after_rounds` rounds, however long the swarm runs."""
    scores = PeerScores(forget_after_rounds=FORGET, ban_rounds=BAN_ROUNDS)
    for round_number in range(40):
        scores.new_round(round_number)
        for key in range(fresh_per_round):
            scores.record_valid(f"{round_number}-{key}")
        assert len(scores.valid) <= FORGET * fresh_per_round


def test_a_ban_lasts_ban_rounds_after_the_peer_was_last_heard() -> None:
    scores = PeerScores(forget_after_rounds=FORGET, ban_rounds=BAN_ROUNDS)
    scores.new_round(10)
    scores.ban("liar", "forged_reward")
    for round_number in range(11, 10 + BAN_ROUNDS):
        scores.new_round(round_number)
        assert scores.is_banned("liar"), round_number
    scores.new_round(10 + BAN_ROUNDS)
    assert not scores.is_banned("liar") and "liar" not in scores.ban_reasons


def test_the_inbox_forgets_a_silent_peer_when_rounds_open() -> None:
    from tests.helpers.inbox import ROUND, make_inbox

    inbox = make_inbox()
    inbox.scores.record_valid("gone")
    assert inbox.established("gone")
    inbox.open_round(ROUND + inbox.scores.forget_after_rounds - 1, 0, connected=0)
    assert inbox.established("gone")
    inbox.open_round(ROUND + inbox.scores.forget_after_rounds, 0, connected=0)
    assert not inbox.established("gone") and "gone" not in inbox.scores.valid
