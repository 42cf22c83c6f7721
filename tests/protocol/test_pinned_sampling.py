"""protocol/sampling.py: the edges of the rules that decide what a peer trains on (which
groups teach, how long a peer is remembered, how far the adaptive split may move), pinned at
their boundaries."""

from __future__ import annotations

import pytest

from protocol.messages import Completion, QuestionGroup, QuestionRef
from protocol.sampling import (
    REWARD_TOLERANCE,
    PeerRecord,
    SamplingRule,
    SamplingState,
    observe_round,
    rewards_differ,
    sample_training_groups,
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


TEACHING = [group(0, [0.0, 1.0])]
FORMAT_ONLY = [group(1, [0.0, 0.2])]


def test_explicit_zero_bounds_are_kept_not_read_as_defaults() -> None:
    assert SamplingRule(min_external=0, max_external=0).external_bounds(8) == (0, 0)
    assert SamplingRule(min_external=0).external_bounds(8) == (0, 6)


def test_a_fraction_may_be_one_but_no_more() -> None:
    assert SamplingRule(solved=1.0).solved == 1.0
    with pytest.raises(ValueError) as raised:
        SamplingRule(solved=1.5)
    assert str(raised.value) == "solved must be in [0, 1], got 1.5"


def test_rewards_exactly_the_tolerance_apart_are_equal() -> None:
    assert not rewards_differ([0.0, REWARD_TOLERANCE])


def test_a_bool_is_not_a_count() -> None:
    with pytest.raises(ValueError) as raised:
        sample_training_groups([], {}, n_local=True, n_external=0, max_per_peer=1, seed=0)
    assert str(raised.value) == "n_local must be a non-negative int, got True"


def test_filtered_rates_are_moving_averages_counted_per_round() -> None:
    rule = SamplingRule(kind="filtered", smoothing=0.25)
    state = observe_round(
        rule, SamplingState(), [], {"a": [], "b": TEACHING}, round_number=0, n_local=4, n_external=4
    )
    assert state.peers["b"] == PeerRecord(rate=1.0, observations=1, last_round=0)  # "a" offered nothing
    state = observe_round(rule, state, [], {"b": FORMAT_ONLY}, round_number=1, n_local=4, n_external=4)
    assert state.peers["b"] == PeerRecord(rate=0.75, observations=2, last_round=1)
    assert "a" not in state.peers


def test_adaptive_rates_are_moving_averages_and_wait_for_both_sides() -> None:
    rule = SamplingRule(kind="adaptive", smoothing=0.25)
    first = observe_round(rule, SamplingState(), [], {"p": TEACHING}, round_number=0, n_local=4, n_external=4)
    assert (first.local_rate, first.external_rate, first.n_external) == (None, 1.0, 4)  # no local side yet
    second = observe_round(rule, first, TEACHING, {"p": FORMAT_ONLY}, round_number=1, n_local=4, n_external=4)
    assert (second.local_rate, second.external_rate) == (1.0, 0.75)
    third = observe_round(
        rule, second, FORMAT_ONLY, {"p": FORMAT_ONLY}, round_number=2, n_local=4, n_external=4
    )
    assert (third.local_rate, third.external_rate) == (0.75, 0.5625)


def test_filtered_draws_are_pinned() -> None:
    # Observed peers of different rates, one at exactly the set-aside line, one never seen: the
    # order of the draw is a function of the rates (weights), the seed and the keys, pinned here.
    rule = SamplingRule(kind="filtered", min_observations=1, drop_below=0.5)
    peers = {
        "high": PeerRecord(rate=1.0, observations=3, last_round=0),
        "mid": PeerRecord(rate=0.75, observations=3, last_round=0),
        "edge": PeerRecord(rate=0.25, observations=3, last_round=0),  # mean 0.5: exactly 0.5 * mean
        "low": PeerRecord(rate=0.0, observations=3, last_round=0),
    }
    state = SamplingState(peers=peers)
    external = {
        peer: [group(10 * n + i, [0.0, 1.0]) for i in range(3)] for n, peer in enumerate([*peers, "new"])
    }
    sampled = sample_training_groups(
        [], external, n_local=0, n_external=15, max_per_peer=3, seed=11, rule=rule, state=state
    )
    order = [peer for peer, _ in sampled.external]
    pinned = ["new", "mid", "new", "edge", "high", "high", "high", "new", "mid", "edge", "mid", "edge"]
    assert order == [*pinned, "low", "low", "low"]  # "low" set aside: taken last


def test_a_side_that_offers_nothing_keeps_its_rate() -> None:
    rule = SamplingRule(kind="adaptive", smoothing=0.25)
    state = observe_round(
        rule, SamplingState(), TEACHING, {"p": TEACHING}, round_number=0, n_local=4, n_external=4
    )
    quiet_local = observe_round(rule, state, [], {"p": FORMAT_ONLY}, round_number=1, n_local=4, n_external=4)
    assert (quiet_local.local_rate, quiet_local.external_rate) == (1.0, 0.75)
    quiet_external = observe_round(rule, state, FORMAT_ONLY, {}, round_number=1, n_local=4, n_external=4)
    assert (quiet_external.local_rate, quiet_external.external_rate) == (0.75, 1.0)


def test_filtered_draws_before_anyone_is_observed_are_pinned() -> None:
    # Nobody observed min_observations times: an unseen peer weighs 1.0, a young peer its rate.
    rule = SamplingRule(kind="filtered", min_observations=3)
    external = {
        peer: [group(10 * n + i, [0.0, 1.0]) for i in range(3)] for n, peer in enumerate(["new", "young"])
    }
    fresh = sample_training_groups([], external, n_local=0, n_external=6, max_per_peer=3, seed=5, rule=rule)
    assert sorted(peer for peer, _ in fresh.external) == ["new"] * 3 + ["young"] * 3
    state = SamplingState(peers={"young": PeerRecord(rate=0.5, observations=1, last_round=0)})
    sampled = sample_training_groups(
        [], external, n_local=0, n_external=6, max_per_peer=3, seed=5, rule=rule, state=state
    )
    assert [peer for peer, _ in sampled.external] == ["young", "new", "young", "new", "new", "young"]


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ({"n_local": -1}, "n_local must be a non-negative int, got -1"),
        ({"n_external": -1}, "n_external must be a non-negative int, got -1"),
        ({"n_external": 1.0}, "n_external must be a non-negative int, got 1.0"),
        ({"max_per_peer": -2}, "max_per_peer must be a non-negative int, got -2"),
        ({"seed": False}, "seed must be an int, got False"),
    ],
)
def test_a_bad_count_is_refused_by_name(counts: dict[str, object], message: str) -> None:
    # The caller's setting is named in the error (a peer's config is where it came from).
    arguments: dict[str, object] = {"n_local": 1, "n_external": 1, "max_per_peer": 1, "seed": 0, **counts}
    with pytest.raises(ValueError) as raised:
        sample_training_groups([], {}, **arguments)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_the_fixed_draw_is_pinned() -> None:
    # The order of the local and external draws is a function of the seed and the keys alone
    # (local groups keyed under the empty owner), so a round's training set can be re-derived.
    local = [group(i, [0.0, 1.0]) for i in range(6)]
    external = {
        "p": [group(10 + i, [0.0, 1.0]) for i in range(3)],
        "q": [group(20 + i, [0.0, 1.0]) for i in range(3)],
    }
    sampled = sample_training_groups(local, external, n_local=6, n_external=6, max_per_peer=3, seed=7)
    assert [g.question.index for g in sampled.local] == [5, 0, 1, 2, 4, 3]
    assert [(peer, g.question.index) for peer, g in sampled.external] == [
        ("p", 10),
        ("p", 12),
        ("q", 20),
        ("q", 22),
        ("q", 21),
        ("p", 11),
    ]


def test_only_an_adaptive_rule_with_a_moved_split_overrides_the_configured_one() -> None:
    local = [group(i, [0.0, 1.0]) for i in range(4)]
    external = {"p": [group(10 + i, [0.0, 1.0]) for i in range(4)]}

    def split(rule: SamplingRule, state: SamplingState) -> tuple[int, int]:
        sampled = sample_training_groups(
            local, external, n_local=2, n_external=2, max_per_peer=4, seed=1, rule=rule, state=state
        )
        return len(sampled.local), len(sampled.external)

    moved = SamplingState(n_external=3)
    assert split(SamplingRule(kind="adaptive"), SamplingState()) == (2, 2)  # nothing learned yet
    assert split(SamplingRule(kind="adaptive"), moved) == (1, 3)
    assert split(SamplingRule(kind="adaptive"), SamplingState(n_external=9)) == (0, 4)  # within the budget
    assert split(SamplingRule(), moved) == (2, 2)  # a fixed rule ignores a state's split


@pytest.mark.parametrize("peer", ["", 5, None])
def test_an_external_peer_id_is_a_non_empty_string(peer: object) -> None:
    # "" is the local groups' owner key: an external peer under it would share their draws.
    with pytest.raises(ValueError) as raised:
        sample_training_groups(
            [],
            {peer: [group(0, [0.0, 1.0])]},
            n_local=0,
            n_external=1,
            max_per_peer=1,
            seed=0,  # type: ignore[dict-item]
        )
    assert str(raised.value) == f"external peer ids must be non-empty strings, got {peer!r}"


def test_fill_tops_up_a_split_with_a_share_of_one_on_either_side() -> None:
    # Any share counts as a share: a 2/1 split short of local groups fills from external ones,
    # and a 1/2 split short of external groups fills from local ones.
    useful = [group(i, [0.0, 1.0]) for i in range(3)]
    rule = SamplingRule(fill=True)
    short_local = sample_training_groups(
        [], {"p": useful}, n_local=2, n_external=1, max_per_peer=3, seed=0, rule=rule
    )
    assert (len(short_local.local), len(short_local.external)) == (0, 3)
    short_external = sample_training_groups(
        useful, {}, n_local=1, n_external=2, max_per_peer=3, seed=0, rule=rule
    )
    assert (len(short_external.local), len(short_external.external)) == (3, 0)
    no_share = sample_training_groups(
        [], {"p": useful}, n_local=2, n_external=0, max_per_peer=3, seed=0, rule=rule
    )
    assert (len(no_share.local), len(no_share.external)) == (0, 0)  # an L/0 peer never takes external groups
