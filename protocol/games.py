"""The games a swarm can play, by name: the one place that maps a swarm rule to a `Game`."""

from __future__ import annotations

from protocol.acr import NAME as ACR_NAME
from protocol.acr import STAGE_COUNT, AnswerCritiqueResolveGame
from protocol.game import Game, SingleStageGame

SINGLE = "single"
GAME_NAMES: tuple[str, ...] = (SINGLE, ACR_NAME)


def make_game(name: str, rules: SingleStageGame) -> Game:
    """The game called `name`, on the swarm's rules `rules` (seed, tasks, registry, limits):
    "single" is `rules` itself; "answer-critique-resolve" answers by `rules` in stage 0."""
    if name == SINGLE:
        return rules
    if name == ACR_NAME:
        return AnswerCritiqueResolveGame(answer=rules)
    raise ValueError(f"unknown game {name!r} (known: {', '.join(GAME_NAMES)})")


def game_of_stage_count(stage_count: int) -> str:
    """The game a swarm's signed schedule names by its stage count: 3 stages a round is
    answer -> critique -> resolve, anything else the single-stage game (which plays a round
    once whatever its stages: a chain-less schedule says 1, a chain contract 2 by default).
    While answer-critique-resolve is the only multi-stage game, the stage count is the name;
    a second one would need a field of its own in `SwarmSchedule` (a PROTOCOL_VERSION bump)."""
    return ACR_NAME if stage_count == STAGE_COUNT else SINGLE


def stage_count_of(name: str) -> int:
    """The stages per round of the game called `name` (what a swarm's schedule must say)."""
    if name == SINGLE:
        return 1
    if name == ACR_NAME:
        return STAGE_COUNT
    raise ValueError(f"unknown game {name!r} (known: {', '.join(GAME_NAMES)})")
