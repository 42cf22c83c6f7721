"""Simulated answers to the later stages of multi-stage games, one module per game, each with
`answer(policy, item, rng) -> str` (policy: a simulator.policy.SimPolicy); the game's registry
row (protocol/games.py) names its module."""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from typing import Any

from protocol.games import spec_of

Answerer = Callable[[Any, Any, random.Random], str]


def answerer_of(game: str) -> Answerer:
    """`answer(policy, item, rng)` of the game called `game` (ValueError: it has no later stages)."""
    module = spec_of(game).answerer
    if module is None:
        raise ValueError(f"game {game} has no items to answer")
    return importlib.import_module(module).answer
