"""Simulated answers to answer -> verify's verify stage (protocol/answer_verify.py): each
candidate is judged right by the task's skill (else by a coin), and the verdict is written in
the answer format with the format skill (else as bare words, which earn nothing)."""

from __future__ import annotations

import random
from typing import Any

from protocol.answer_verify import VerifyItem, format_verdicts


def answer(policy: Any, item: VerifyItem, rng: random.Random) -> str:
    skill = policy.skills.get(item.question.task, 0.0)
    truth = item.truth(policy.registry)
    verdicts = tuple(true if rng.random() < skill else rng.random() < 0.5 for true in truth)
    text = format_verdicts(verdicts)
    return (
        text
        if rng.random() < policy.format_skill
        else text.removeprefix("<answer>").removesuffix("</answer>")
    )
