"""Sampling rules beyond the fixed split: top-up to a constant budget, the adaptive split, the
filtered-peer rule. All pure functions of (inputs, state, seed)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.messages import Completion, QuestionGroup, QuestionRef
from protocol.sampling import (
    SamplingRule,
    SamplingState,
    has_advantage,
    observe_round,
    sample_training_groups,
    teaches,
)

SOLVED = 0.6


def group(index: int, rewards: list[float], task: str = "t") -> QuestionGroup:
    return QuestionGroup(QuestionRef(task, 0, index), tuple(Completion(str(r), r) for r in rewards))


def teaching(index: int) -> QuestionGroup:
    return group(index, [0.2, 1.0, 0.2, 0.2])  # a right answer among wrong ones


def format_only(index: int) -> QuestionGroup:
    return group(index, [0.0, 0.2, 0.2, 0.0])  # advantage, but nobody solved it


def flat(index: int) -> QuestionGroup:
    return group(index, [0.2, 0.2, 0.2, 0.2])


reward_lists = st.lists(st.sampled_from([0.0, 0.2, 1.0]), min_size=2, max_size=4)
groups = st.builds(group, st.integers(0, 10**6), reward_lists)


@given(
    local=st.lists(groups, max_size=10),
    external=st.dictionaries(st.sampled_from("abcdef"), st.lists(groups, max_size=6), max_size=6),
    n_local=st.integers(0, 8),
    n_external=st.integers(0, 8),
    cap=st.integers(1, 4),
    seed=st.integers(0, 2**32),
)
def test_fill_keeps_the_budget_whenever_the_swarm_offers_it(local, external, n_local, n_external, cap, seed):
    rule = SamplingRule(fill=True)
    sampled = sample_training_groups(
        local, external, n_local=n_local, n_external=n_external, max_per_peer=cap, seed=seed, rule=rule
    )
    useful_local = sum(has_advantage(g) for g in local)
    useful_external = sum(min(cap, sum(has_advantage(g) for g in gs)) for gs in external.values())
    assert all(has_advantage(g) for g in sampled.all_groups())
    assert all(count <= cap for count in Counter(peer for peer, _ in sampled.external).values())
    if n_local and n_external:
        assert len(sampled.all_groups()) == min(n_local + n_external, useful_local + useful_external)
    else:  # a one-sided split never borrows from the other side
        assert len(sampled.local) == min(n_local, useful_local)
        assert len(sampled.external) == min(n_external, useful_external)
    # Without a shortfall, the split is exactly as configured.
    if useful_local >= n_local and useful_external >= n_external:
        assert (len(sampled.local), len(sampled.external)) == (n_local, n_external)


def test_teaching_groups_need_a_solved_completion_and_advantage():
    assert teaches(teaching(0), SOLVED)
    assert not teaches(format_only(0), SOLVED)
    assert not teaches(group(0, [1.0, 1.0]), SOLVED)  # solved by all: nothing to learn


def _observe(rule, state, local, external, round_number=0):
    return observe_round(rule, state, local, external, round_number=round_number, n_local=4, n_external=4)


def test_adaptive_moves_towards_the_source_that_teaches_and_stays_in_bounds():
    rule = SamplingRule(kind="adaptive", solved=SOLVED)
    state = SamplingState()
    external_teaches = {"a": [teaching(i) for i in range(4)], "b": [teaching(i + 10) for i in range(4)]}
    own_does_not = [format_only(i) for i in range(8)]
    seen = []
    for round_number in range(6):
        state = _observe(rule, state, own_does_not, external_teaches, round_number)
        seen.append(state.n_external)
    assert seen == [5, 6, 6, 6, 6, 6]  # one step a round, capped at 3/4 of the budget
    sampled = sample_training_groups(
        [teaching(i + 100) for i in range(8)],
        external_teaches,
        n_local=4,
        n_external=4,
        max_per_peer=4,
        seed=1,
        rule=rule,
        state=state,
    )
    assert (len(sampled.local), len(sampled.external)) == (2, 6)  # same total, new split
    # And back down when its own groups teach and the swarm's do not.
    for round_number in range(6, 20):
        state = _observe(rule, state, [teaching(i) for i in range(8)], {"a": [format_only(0)]}, round_number)
    assert state.n_external == 2


def test_adaptive_holds_still_when_both_sources_teach_alike():
    rule = SamplingRule(kind="adaptive", solved=SOLVED)
    state = SamplingState()
    for round_number in range(10):
        state = _observe(
            rule, state, [teaching(0), format_only(1)], {"a": [teaching(2), format_only(3)]}, round_number
        )
    assert state.n_external == 4


def test_filtered_sets_aside_a_peer_whose_groups_never_teach():
    rule = SamplingRule(kind="filtered", solved=SOLVED, min_observations=3)
    external = {
        "good": [teaching(i) for i in range(4)],
        "fine": [teaching(10), teaching(11), format_only(12), teaching(13)],
        "useless": [format_only(20 + i) for i in range(4)],
    }
    state = SamplingState()
    for round_number in range(3):
        state = _observe(rule, state, [], external, round_number)
    assert state.peers["useless"].rate == 0.0 and state.peers["good"].rate == 1.0
    picked = Counter()
    for seed in range(200):
        sampled = sample_training_groups(
            [], external, n_local=0, n_external=4, max_per_peer=4, seed=seed, rule=rule, state=state
        )
        assert len(sampled.external) == 4
        picked.update(peer for peer, _ in sampled.external)
    assert picked["useless"] == 0  # set aside: others had enough
    assert picked["good"] > picked["fine"] > 0  # drawn in proportion to how much they teach
    # Set-aside peers are still the last resort: the budget stays whole.
    sampled = sample_training_groups(
        [], external, n_local=0, n_external=10, max_per_peer=4, seed=0, rule=rule, state=state
    )
    assert Counter(peer for peer, _ in sampled.external) == {"good": 4, "fine": 4, "useless": 2}


def test_filtered_forgets_peers_not_seen_for_a_while():
    rule = SamplingRule(kind="filtered", forget_rounds=5)
    state = _observe(rule, SamplingState(), [], {"gone": [teaching(0)]}, 0)
    for round_number in range(1, 7):
        state = _observe(rule, state, [], {"here": [teaching(round_number)]}, round_number)
    assert set(state.peers) == {"here"}


def test_fixed_rule_keeps_no_state_and_unknown_kinds_are_refused():
    state = SamplingState()
    assert _observe(SamplingRule(), state, [teaching(0)], {"a": [teaching(1)]}) is state
    with pytest.raises(ValueError):
        SamplingRule(kind="greedy")


@given(seed=st.integers(0, 2**32), kind=st.sampled_from(["fixed", "adaptive", "filtered"]))
def test_every_rule_is_deterministic_and_order_independent(seed, kind):
    rule = SamplingRule(kind=kind, fill=True, solved=SOLVED)
    external = {
        "a": [teaching(1), format_only(2), flat(3)],
        "b": [format_only(4), teaching(5)],
        "c": [teaching(6)],
    }
    local = [teaching(7), format_only(8), flat(9)]
    state = _observe(rule, SamplingState(), local, external)
    first = sample_training_groups(
        local, external, n_local=2, n_external=3, max_per_peer=2, seed=seed, rule=rule, state=state
    )
    again = sample_training_groups(
        local,
        dict(reversed(list(external.items()))),
        n_local=2,
        n_external=3,
        max_per_peer=2,
        seed=seed,
        rule=rule,
        state=_observe(rule, SamplingState(), local, dict(reversed(list(external.items())))),
    )
    assert first == again
