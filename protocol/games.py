"""The games a swarm can play: one registry row (`GameSpec`) per game, the one place that maps
a game's name (what the signed `SwarmSchedule` carries) to its rules.

A row says everything the rest of the system asks of a game: its stages and which of them
train and vote (the round machine's `StagePlan`), how to build its rules on the swarm's
scoring rules (`make`), the store its later stages build on, and, by module path so that
protocol/ imports neither, the trainer's prompts (`prompt(item, question_text)`) and the
simulator's answerer (`answer(policy, item, rng)`) of its later stages.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from protocol import acr, answer_verify
from protocol.game import Game, SingleStageGame
from protocol.rounds import StagePlan
from protocol.stage_inputs import InputStore


@attrs.frozen
class GameSpec:
    name: str
    stage_names: tuple[str, ...]
    train_stages: frozenset[int]
    vote_stage: int
    """The stage after which a peer reports its winners and runs the held-out evaluation."""
    make: Callable[[SingleStageGame], Game]
    """The game's rules on the swarm's scoring rules (seed, tasks, registry, limits)."""
    store: Callable[[], InputStore] = InputStore
    prompts: str | None = None
    """Module (trainer side) whose `prompt(item, question_text)` words a later-stage item."""
    answerer: str | None = None
    """Module (simulator side) whose `answer(policy, item, rng)` answers a later-stage item."""

    @property
    def stage_count(self) -> int:
        return len(self.stage_names)

    @property
    def plan(self) -> StagePlan:
        """What the round machine takes from the game."""
        return StagePlan(self.stage_count, self.train_stages, self.vote_stage)


def _single(rules: SingleStageGame) -> Game:
    return rules


def _acr(rules: SingleStageGame) -> Game:
    return acr.AnswerCritiqueResolveGame(answer=rules)


def _answer_verify(rules: SingleStageGame) -> Game:
    return answer_verify.AnswerVerifyGame(answer=rules)


SINGLE = "single"
REGISTRY: dict[str, GameSpec] = {
    spec.name: spec
    for spec in (
        GameSpec(SINGLE, ("answer",), frozenset({0}), 0, _single),
        GameSpec(
            acr.NAME,
            acr.STAGE_NAMES,
            acr.TRAIN_STAGES,
            acr.RESOLVE,
            _acr,
            prompts="trainer.prompts.acr",
            answerer="simulator.answerers.acr",
        ),
        GameSpec(
            answer_verify.NAME,
            answer_verify.STAGE_NAMES,
            answer_verify.TRAIN_STAGES,
            answer_verify.VERIFY,
            _answer_verify,
            prompts="trainer.prompts.answer_verify",
            answerer="simulator.answerers.answer_verify",
        ),
    )
}
GAME_NAMES: tuple[str, ...] = tuple(REGISTRY)


def spec_of(name: str) -> GameSpec:
    """The registry row of the game called `name` (ValueError for a game this peer lacks)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown game {name!r} (known: {', '.join(GAME_NAMES)})") from None


def make_game(name: str, rules: SingleStageGame) -> Game:
    """The game called `name`, on the swarm's rules `rules` (seed, tasks, registry, limits)."""
    return spec_of(name).make(rules)


def stage_count_of(name: str) -> int:
    """The stages per round of the game called `name` (what a swarm's schedule must say)."""
    return spec_of(name).stage_count
