"""Training-group sampling: only groups with advantage, within counts and caps, deterministic."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.messages import Completion, QuestionGroup, QuestionRef
from protocol.sampling import has_advantage, sample_training_groups


def group(index: int, rewards: list[float]) -> QuestionGroup:
    return QuestionGroup(QuestionRef("t", 0, index), tuple(Completion(str(r), r) for r in rewards))


reward_lists = st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=4)
groups = st.builds(group, st.integers(0, 10**6), reward_lists)
local_groups = st.lists(groups, max_size=10)
external_groups = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d", "e"]), st.lists(groups, max_size=6), max_size=5
)
counts = st.integers(0, 8)


@given(
    local=local_groups,
    external=external_groups,
    n_local=counts,
    n_external=counts,
    cap=st.integers(0, 4),
    seed=st.integers(0, 2**64),
)
def test_sampling_rules(local, external, n_local, n_external, cap, seed):
    sampled = sample_training_groups(
        local, external, n_local=n_local, n_external=n_external, max_per_peer=cap, seed=seed
    )
    useful_local = [g for g in local if has_advantage(g)]
    useful_external = {peer: [g for g in gs if has_advantage(g)] for peer, gs in external.items()}

    assert all(has_advantage(g) for g in sampled.all_groups())
    assert sampled.dropped_zero_advantage == (
        len(local) - len(useful_local) + sum(len(gs) - len(useful_external[p]) for p, gs in external.items())
    )
    # Never more than asked, as many as available.
    assert len(sampled.local) == min(n_local, len(useful_local))
    available_external = sum(min(cap, len(gs)) for gs in useful_external.values())
    assert len(sampled.external) == min(n_external, available_external)
    per_peer = Counter(peer for peer, _ in sampled.external)
    assert all(count <= cap for count in per_peer.values())
    # Every sampled group really came from where it says (as a multiset).
    assert not Counter(sampled.local) - Counter(useful_local)
    for peer, count in per_peer.items():
        taken = Counter(g for p, g in sampled.external if p == peer)
        assert not taken - Counter(useful_external[peer])
        assert sum(taken.values()) == count

    # Deterministic, and independent of the mapping's insertion order.
    shuffled_peers = list(external.items())
    random.Random(seed).shuffle(shuffled_peers)
    again = sample_training_groups(
        local, dict(shuffled_peers), n_local=n_local, n_external=n_external, max_per_peer=cap, seed=seed
    )
    assert again == sampled


def test_seed_changes_the_choice():
    local = [group(i, [0.0, 1.0]) for i in range(20)]
    choices = {
        sample_training_groups(local, {}, n_local=4, n_external=0, max_per_peer=0, seed=s).local
        for s in range(10)
    }
    assert len(choices) > 1


def test_zero_advantage_groups_are_dropped_and_counted():
    flat = [group(0, [1.0, 1.0]), group(1, [0.0]), group(2, [])]
    sampled = sample_training_groups(
        [*flat, group(3, [0.0, 1.0])],
        {"x": [group(4, [0.5, 0.5]), group(5, [0.5, 0.0])]},
        n_local=4,
        n_external=4,
        max_per_peer=4,
        seed=0,
    )
    assert sampled.local == (group(3, [0.0, 1.0]),)
    assert sampled.external == (("x", group(5, [0.5, 0.0])),)
    assert sampled.dropped_zero_advantage == 4


@pytest.mark.parametrize("kwargs", [{"n_local": -1}, {"n_external": -1}, {"max_per_peer": -1}, {"seed": "x"}])
def test_bad_arguments_are_value_errors(kwargs):
    arguments = {"n_local": 1, "n_external": 1, "max_per_peer": 1, "seed": 0} | kwargs
    with pytest.raises(ValueError):
        sample_training_groups([], {}, **arguments)
