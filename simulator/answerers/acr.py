"""Simulated answers to answer -> critique -> resolve's later stages (protocol/acr.py): a
critique picks a right candidate with the task's skill (else any), written in the answer
format with the format skill; a resolve mostly follows the critics' majority, else answers the
question itself."""

from __future__ import annotations

import random
from typing import Any

from protocol.acr import CRITIQUE, StageItem
from simulator.registry import format_answer


def answer(policy: Any, item: StageItem, rng: random.Random) -> str:
    return critique(policy, item, rng) if item.stage == CRITIQUE else resolve(policy, item, rng)


def critique(policy: Any, item: StageItem, rng: random.Random) -> str:
    right = [
        i for i, text in enumerate(item.candidates, 1) if policy.registry.score(item.question, text) >= 1.0
    ]
    skilled = right and rng.random() < policy.skills.get(item.question.task, 0.0)
    pick = rng.choice(right) if skilled else rng.randrange(1, len(item.candidates) + 1)
    return format_answer(str(pick)) if rng.random() < policy.format_skill else str(pick)


def resolve(policy: Any, item: StageItem, rng: random.Random) -> str:
    majority = item.majority()
    if majority and rng.random() < 0.8:
        return item.candidates[majority - 1]
    return policy.answer(item.question, rng)
