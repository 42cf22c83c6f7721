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
    """Graded credit for the answer format, 0.2 per condition met: an opening tag, a closing tag,
    exactly one of each, and nothing but whitespace after the closing tag.

    The gradation gives GRPO a within-group difference to learn from long before the model
    writes a perfect block; 1.0 means the completion is exactly `...<answer>X</answer>`.
    """
    opens = completion.count(ANSWER_OPEN)
    closes = completion.count(ANSWER_CLOSE)
    checks = (
        opens >= 1,
        closes >= 1,
        opens == 1,
        closes == 1,
        closes >= 1 and completion.rsplit(ANSWER_CLOSE, 1)[1].strip() == "" and _ANSWER_RE.search(completion),
    )
    return 0.2 * sum(bool(check) for check in checks)


def safe_score(
    score_answer: Callable[[str | None, dict[str, Any]], float], answer: str | None, entry: dict[str, Any]
) -> float:
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
