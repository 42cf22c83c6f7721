"""Games as registry rows (protocol/games.py): each row builds the game it describes, the
round machine trains and votes in exactly the stages a row says (through its table), and the
second game, answer -> verify (protocol/answer_verify.py), scores verdicts as its rules say."""

from __future__ import annotations

import hashlib
import importlib

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.answer_verify import VERIFY, AnswerVerifyGame, VerifyItem, format_verdicts, parse_verdicts
from protocol.envelope import peer_id_from_seed, seal
from protocol.game import SingleStageGame
from protocol.games import GAME_NAMES, REGISTRY, make_game, spec_of
from protocol.messages import Completion, QuestionGroup, QuestionRef, RolloutBatch
from protocol.rounds import (
    Generate,
    Publish,
    Report,
    ReportFinished,
    RolloutsReady,
    RoundMachine,
    RoundOpened,
    StagePlan,
    Tick,
    Train,
    TrainingFinished,
)
from protocol.staged import InputStore
from tests.helpers.inbox import EchoRegistry

RULES = SingleStageGame(seed=5, tasks=("echo",), questions_per_round=2, registry=EchoRegistry())
GAME = AnswerVerifyGame(answer=RULES)
ROUND = 3


def pid(name: str) -> str:
    return peer_id_from_seed(hashlib.sha256(name.encode()).digest())


@pytest.mark.parametrize("name", GAME_NAMES)
def test_each_row_builds_the_game_it_describes(name: str) -> None:
    spec = spec_of(name)
    game = make_game(name, RULES)
    assert game.name == name and game.stage_count == spec.stage_count
    assert all(game.trains(stage) == (stage in spec.train_stages) for stage in range(spec.stage_count))
    assert 0 <= spec.vote_stage < spec.stage_count
    staged = spec.stage_count > 1
    assert any(game.builds_on_inputs(stage) for stage in range(spec.stage_count)) == staged
    if staged:  # a game with later stages names where its prompts and simulated answers live
        assert callable(importlib.import_module(spec.prompts or "").prompt)
        assert callable(importlib.import_module(spec.answerer or "").answer)
    assert isinstance(spec.store(), InputStore)


def test_an_unknown_game_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown game 'chess'"):
        spec_of("chess")


def play_round(machine: RoundMachine, round_number: int, stages: int) -> list[object]:
    """Every stage of a round through the machine, the driver's answers fed back at once."""
    actions: list[object] = []
    for stage in range(stages):
        start = (round_number * stages + stage) * 1000
        opened = machine.handle(start, RoundOpened(round_number, start + 500, start + 1000, stage=stage))
        actions += opened
        actions += machine.handle(start + 1, RolloutsReady(round_number, stage))
        done = machine.handle(start + 600, Tick())
        actions += done
        if any(isinstance(action, Train) for action in done):
            done = machine.handle(start + 700, TrainingFinished(round_number, stage))
            actions += done
        actions += machine.handle(start + 800, ReportFinished(round_number, stage))
    return actions


@given(
    stage_count=st.integers(min_value=1, max_value=4),
    trains=st.sets(st.integers(min_value=0, max_value=3)),
    vote=st.integers(min_value=0, max_value=3),
)
def test_the_machine_trains_and_votes_in_exactly_the_stages_the_plan_says(
    stage_count: int, trains: set[int], vote: int
) -> None:
    # Fails if the table stops passing TRAINING through, or a Report votes in the wrong stage.
    vote = min(vote, stage_count - 1)
    plan = StagePlan(stage_count, frozenset(trains), vote)
    actions = play_round(RoundMachine(plan=plan), 0, stage_count)
    opened = [(a.round, a.stage) for a in actions if isinstance(a, Generate)]
    assert opened == [(0, stage) for stage in range(stage_count)]
    trained = [a.stage for a in actions if isinstance(a, Train)]
    expected = [s for s in range(stage_count) if s in trains] if stage_count > 1 else [0]
    assert trained == expected
    reports = [a for a in actions if isinstance(a, Report)]
    assert [a.stage for a in reports] == list(range(stage_count))  # every stage reports its reward
    assert [a.stage for a in reports if a.votes] == ([vote] if stage_count > 1 else [0])
    assert sum(isinstance(a, Publish) for a in actions) == stage_count


def test_every_registry_row_drives_the_machine() -> None:
    for spec in REGISTRY.values():
        actions = play_round(RoundMachine(plan=spec.plan), 0, spec.stage_count)
        assert [a.stage for a in actions if isinstance(a, Train)] == sorted(spec.train_stages)
        assert [a.stage for a in actions if isinstance(a, Report) and a.votes] == [spec.vote_stage]


# ---- answer -> verify ---------------------------------------------------------------------

QUESTION = QuestionRef("echo", 1, 7)


def item(candidates: tuple[str, ...]) -> VerifyItem:
    return VerifyItem(VERIFY, QuestionRef(pid("alice"), 9, 0), QUESTION, candidates)


candidate_lists = st.lists(st.sampled_from(["7", "8", "seven", ""]), min_size=1, max_size=6).map(tuple)


@given(candidates=candidate_lists, flips=st.sets(st.integers(min_value=0, max_value=5)))
def test_a_verdict_earns_the_share_of_candidates_it_judges_right(
    candidates: tuple[str, ...], flips: set[int]
) -> None:
    subject = item(candidates)
    truth = subject.truth(EchoRegistry())
    assert truth == tuple(text == "7" for text in candidates)
    said = tuple(not true if index in flips else true for index, true in enumerate(truth))
    wrong = len([index for index in flips if index < len(candidates)])
    assert subject.score(format_verdicts(said), EchoRegistry()) == (len(candidates) - wrong) / len(candidates)
    assert parse_verdicts(format_verdicts(said)) == said
    assert subject.score(format_verdicts((*said, True)), EchoRegistry()) == 0.0  # one verdict too many
    assert subject.score(" ".join("yes" if s else "no" for s in said), EchoRegistry()) == 0.0  # unformatted


def test_verdict_words_are_read_leniently_but_nothing_else_counts() -> None:
    assert parse_verdicts("thinking...\n<answer>Yes, no</answer>") == (True, False)
    assert parse_verdicts("<answer>yes maybe</answer>") is None
    assert parse_verdicts("<answer></answer>") is None
    assert parse_verdicts("<answer>yes</answer> and more") is None


def stored_answers(*authors: str) -> InputStore:
    store = InputStore()
    for author in authors:
        groups = tuple(
            QuestionGroup(q, (Completion(str(q.index), 1.0), Completion("no", 0.0)))
            for q in GAME.questions(ROUND, 0, pid(author))
        )
        batch = RolloutBatch("s", ROUND, 0, pid(author), groups)
        store.add(hashlib.sha256(seal(batch, hashlib.sha256(author.encode()).digest())).digest(), batch)
    return store


def verdicts_batch(author: str, items: tuple[VerifyItem, ...], lie: float = 0.0) -> RolloutBatch:
    groups = []
    for subject in items:
        texts = (
            format_verdicts(subject.truth(RULES.registry)),
            format_verdicts((True,) * len(subject.candidates)),
        )
        completions = tuple(Completion(t, subject.score(t, RULES.registry) + lie) for t in texts)
        groups.append(QuestionGroup(subject.ref, completions))
    return RolloutBatch("s", ROUND, VERIFY, pid(author), tuple(groups))


def test_honest_verdicts_verify_and_forged_ones_do_not() -> None:
    store = stored_answers("alice", "bob", "carol")
    items = GAME.items(ROUND, VERIFY, pid("carol"), store)
    assert items and all(subject.ref.task != pid("carol") for subject in items)  # never its own
    honest = verdicts_batch("carol", items)
    assert GAME.resolve(honest, store) == items and GAME.verify(honest, items).ok
    assert GAME.verify(verdicts_batch("carol", items, lie=0.25), items).reason == "forged_reward"
    own = attrs.evolve(items[0], ref=QuestionRef(pid("carol"), items[0].ref.dataset_seed, 0))
    assert GAME.resolve(verdicts_batch("carol", (own,)), store).reason == "self_reference"  # type: ignore[union-attr]
    assert GAME.training_groups(VERIFY, items, honest.groups) == honest.groups


def test_a_one_stage_game_votes_in_whichever_coordinator_stage_its_round_opened() -> None:
    # A chain contract of 2 stages: a peer that first sees a round in its stage 1 plays it then,
    # and that round's report is still the one vote and evaluation of the round.
    machine = RoundMachine(plan=spec_of("single").plan)
    assert machine.handle(0, RoundOpened(4, 500, 1000, stage=1)) == (Generate(4, 1),)
    machine.handle(1, RolloutsReady(4, 1))
    assert machine.handle(600, Tick()) == (Train(4, 1),)
    assert machine.handle(700, TrainingFinished(4, 1)) == (Report(4, 1, votes=True),)
