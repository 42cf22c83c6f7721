"""protocol/sampling.py: the edges of the rules that decide what a peer trains on (which
groups teach, how long a peer is remembered, how far the adaptive split may move), pinned at
their boundaries."""

from __future__ import annotations

import pytest

from protocol.messages import Completion, QuestionGroup, QuestionRef
from protocol.sampling import (
    REWARD_TOLERANCE,
    SamplingRule,
    SamplingState,
    observe_round,
    rewards_differ,
    teaches,
)


def group(index: int, rewards: list[float]) -> QuestionGroup:
    return QuestionGroup(QuestionRef("t", 0, index), tuple(Completion(str(r), r) for r in rewards))


def test_rewards_differ_only_beyond_the_tolerance_and_only_in_a_group() -> None:
    assert not rewards_differ([0.5])  # one completion has no advantage, whatever its reward
    assert not rewards_differ([])
    assert not rewards_differ([0.25, 0.25 + REWARD_TOLERANCE / 2])
    assert rewards_differ([0.25, 0.25 + 2 * REWARD_TOLERANCE])
    assert rewards_differ([0.0, 1.0])


def test_a_completion_at_exactly_the_solved_reward_solved_it() -> None:
    assert teaches(group(0, [0.0, 0.6]), solved=0.6)
    assert not teaches(group(0, [0.0, 0.59]), solved=0.6)
    assert not teaches(group(0, [0.6, 0.6]), solved=0.6)  # solved, but no advantage


@pytest.mark.parametrize(
    ("rule", "budget", "bounds"),
    [
        (SamplingRule(), 8, (2, 6)),
        (SamplingRule(), 7, (1, 6)),
        (SamplingRule(), 0, (0, 0)),
        (SamplingRule(min_external=3, max_external=5), 8, (3, 5)),
        (SamplingRule(min_external=10, max_external=12), 8, (8, 8)),
        (SamplingRule(min_external=4, max_external=1), 8, (4, 4)),  # never below the low bound
    ],
)
def test_the_adaptive_split_stays_within_its_bounds(
    rule: SamplingRule, budget: int, bounds: tuple[int, int]
) -> None:
    assert rule.external_bounds(budget) == bounds


def test_a_peer_is_remembered_for_exactly_forget_rounds_rounds() -> None:
    rule = SamplingRule(kind="filtered", forget_rounds=5)
    state = observe_round(
        rule, SamplingState(), [], {"p": [group(0, [0.0, 1.0])]}, round_number=10, n_local=4, n_external=4
    )

    def later(round_number: int) -> SamplingState:
        return observe_round(rule, state, [], {}, round_number=round_number, n_local=4, n_external=4)

    assert "p" in later(14).peers
    assert "p" not in later(15).peers


def test_an_adaptive_split_with_no_margin_holds_still_on_equal_rates() -> None:
    rule = SamplingRule(kind="adaptive", margin=0.0, solved=0.6)
    teaching = [group(0, [0.0, 1.0])]
    state = observe_round(
        rule, SamplingState(), teaching, {"p": teaching}, round_number=0, n_local=4, n_external=4
    )
    assert state.n_external == 4
    more = observe_round(
        rule,
        SamplingState(),
        [group(1, [0.0, 0.2])],
        {"p": teaching},
        round_number=0,
        n_local=4,
        n_external=4,
    )
    assert more.n_external == 5
    fewer = observe_round(
        rule,
        SamplingState(),
        teaching,
        {"p": [group(1, [0.0, 0.2])]},
        round_number=0,
        n_local=4,
        n_external=4,
    )
    assert fewer.n_external == 3
