"""protocol/game.py: the single-stage game passes its own verification settings on (a swarm's
tolerance and trusted mode are what every peer agreed to), and the round's reward and winners
are computed the same by every peer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.game import SingleStageGame, mean_reward, rank_winners
from protocol.messages import Completion, QuestionGroup, QuestionRef, RolloutBatch
from protocol.questions import questions_for
from tests.helpers.inbox import EchoRegistry

PEER = "peer"


def game(**settings: object) -> SingleStageGame:
    return SingleStageGame(
        seed=3, tasks=("echo",), questions_per_round=2, registry=EchoRegistry(), **settings
    )  # type: ignore[arg-type]


def batch(claimed: float) -> RolloutBatch:
    # Each question's right answer (EchoRegistry: its index) with a claimed reward of `claimed`.
    questions = game().questions(0, 0, PEER)
    groups = tuple(
        QuestionGroup(q, (Completion(str(q.index), claimed), Completion("no", 0.0))) for q in questions
    )
    return RolloutBatch("s", 0, 0, PEER, groups)


def test_verification_uses_the_games_tolerance() -> None:
    assert game().verify(batch(1.0)).ok
    assert game().verify(batch(0.99)).reason == "forged_reward"
    assert game(tolerance=0.05).verify(batch(0.99)).ok
    assert game(tolerance=0.001).verify(batch(0.99)).reason == "forged_reward"


def test_a_game_that_does_not_rescore_takes_claimed_rewards_on_trust() -> None:
    verdict = game(rescore=False).verify(batch(0.0))
    assert verdict.ok and verdict.groups_checked == 0
    assert game().verify(batch(0.0)).reason == "forged_reward"


def test_a_single_stage_game_trains_on_every_group_as_given() -> None:
    groups = [QuestionGroup(QuestionRef("echo", 3, i), (Completion("x", 0.0),)) for i in range(3)]
    assert game().training_groups(0, (), iter(groups)) == tuple(groups)


def test_the_mean_reward_is_over_every_completion() -> None:
    groups = [
        QuestionGroup(
            QuestionRef("echo", 0, 0), (Completion("a", 1.0), Completion("b", 0.0), Completion("c", 0.5))
        ),
        QuestionGroup(QuestionRef("echo", 0, 1), (Completion("d", 0.5),)),
    ]
    assert mean_reward(groups) == 0.5  # 2.0 over 4 completions, not the mean of group means
    assert mean_reward(groups[1:]) == 0.5
    assert mean_reward([QuestionGroup(QuestionRef("echo", 0, 2), (Completion("e", 0.25),))] * 3) == 0.25
    assert mean_reward([]) is None
    assert mean_reward([QuestionGroup(QuestionRef("echo", 0, 0), ())]) is None


def test_winners_are_the_best_rewards_with_ties_broken_by_peer_id() -> None:
    rewards = {"c": 0.5, "a": 0.5, "b": 0.9, "d": 0.1}
    assert rank_winners(rewards, 3) == ["b", "a", "c"]
    assert rank_winners(rewards, 1) == ["b"]
    assert rank_winners(rewards, 0) == []
    assert rank_winners(rewards, 9) == ["b", "a", "c", "d"]
    assert rank_winners({}, 2) == []


@given(st.dictionaries(st.sampled_from("abcdef"), st.sampled_from([0.0, 0.25, 0.5, 1.0])), st.integers(0, 7))
def test_winners_do_not_depend_on_the_order_rewards_arrived_in(rewards: dict[str, float], count: int) -> None:
    winners = rank_winners(rewards, count)
    assert winners == rank_winners(dict(reversed(list(rewards.items()))), count)
    assert len(winners) == min(count, len(rewards))
    losers = set(rewards) - set(winners)
    assert all(rewards[w] >= rewards[loser] for w in winners for loser in losers)


TASKS = ("a", "b", "c")


class EvenHeldOut(EchoRegistry):
    """Even question indices are held out."""

    def is_heldout(self, question: QuestionRef) -> bool:
        return question.index % 2 == 0


def test_a_specialised_peer_answers_its_specialty_only() -> None:
    specialised = SingleStageGame(
        seed=3,
        tasks=TASKS,
        questions_per_round=8,
        registry=EchoRegistry(),
        weights=(1.0, 0.0, 0.0),
        specialised=True,
    )
    # p1..p4 have specialties c, b, c, a: every peer's derivation, whatever the swarm's weights.
    for peer, task in [("p1", "c"), ("p2", "b"), ("p3", "c"), ("p4", "a")]:
        questions = specialised.questions(0, 0, peer)
        assert questions == questions_for(3, 0, 0, peer, (task,), 8)
        assert {q.task for q in questions} == {task}


def test_the_swarms_task_weights_and_held_out_rule_decide_the_questions() -> None:
    weighted = SingleStageGame(
        seed=3, tasks=TASKS, questions_per_round=8, registry=EchoRegistry(), weights=(0.0, 1.0, 0.0)
    )
    assert {q.task for q in weighted.questions(0, 0, "p1")} == {"b"}
    uniform = SingleStageGame(seed=3, tasks=TASKS, questions_per_round=8, registry=EchoRegistry())
    assert len({q.task for q in uniform.questions(0, 0, "p1")}) > 1
    held = SingleStageGame(seed=3, tasks=TASKS, questions_per_round=64, registry=EvenHeldOut())
    questions = held.questions(0, 0, "p1")
    assert len(questions) == 64 and all(q.index % 2 == 1 for q in questions)
