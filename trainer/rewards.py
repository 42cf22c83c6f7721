"""Reward functions: pull the `<answer>` out of a completion and score it safely.

Every function here is deterministic and never raises: peers verify each other's claimed
rewards by re-scoring, so a reward must be a pure function of (question, completion text).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract_answer(completion: str) -> str | None:
    """The text inside the LAST complete `<answer>...</answer>`, stripped; None when there is none.

    The last one wins because models often restate a draft answer before the final one.
    """
    matches = _ANSWER_RE.findall(completion)
    if not matches:
        return None
    return matches[-1].strip()


def format_score(completion: str) -> float:
    """1.0 for exactly one well-formed answer block, partial credit for each tag on its way there.

    The partial credit gives GRPO a gradient before the model has ever produced a full block.
    """
    opens = completion.count(ANSWER_OPEN)
    closes = completion.count(ANSWER_CLOSE)
    if opens == 1 and closes == 1 and _ANSWER_RE.search(completion):
        return 1.0
    return 0.25 * min(opens, 1) + 0.25 * min(closes, 1)


def safe_score(score_answer: Callable[[str | None, dict[str, Any]], float], answer: str | None,
               entry: dict[str, Any]) -> float:
    """`score_answer(answer, entry)` clamped to [0, 1]; any exception or non-finite value scores 0.

    Some reasoning-gym scorers raise on malformed answers (prime_factorization, for one).
    """
    try:
        value = float(score_answer(answer, entry))
    except Exception:
        return 0.0
    if not math.isfinite(value):
        return 0.0
    return min(1.0, max(0.0, value))


def combine(correctness: float, fmt: float, format_weight: float) -> float:
    return (1.0 - format_weight) * correctness + format_weight * fmt
