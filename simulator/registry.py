"""A cheap deterministic task registry for the simulator (no reasoning-gym, no torch).

Each question `(task, dataset_seed, index)` has a reference answer derived from blake2b, so any
peer regenerates it exactly as `trainer.tasks.ReasoningGymRegistry` regenerates a real item.
Scoring mirrors the shape of real rewards: a well-formatted correct answer earns 1.0, a
well-formatted wrong answer earns FORMAT_REWARD (learning the format is the first thing a small
model picks up), anything else earns 0.0. It never raises.
"""

from __future__ import annotations

import functools
import hashlib

from protocol.messages import QuestionRef

DEFAULT_TASKS: tuple[str, ...] = ("arithmetic", "chain_sum", "letter_count", "word_sort")
FORMAT_REWARD = 0.1
_OPEN, _CLOSE = "<answer>", "</answer>"


def reference_answer(question: QuestionRef) -> str:
    """The one correct answer of a simulated question (a small number, as text)."""
    return _answer(question.task, question.dataset_seed, question.index)


@functools.lru_cache(maxsize=1 << 16)
def _answer(task: str, dataset_seed: int, index: int) -> str:
    # Cached: every question is scored by its author and by each peer that verifies it.
    key = f"{task}|{dataset_seed}|{index}".encode()
    return str(int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big") % 1000)


def format_answer(answer: str) -> str:
    return f"{_OPEN}{answer}{_CLOSE}"


class SimTaskRegistry:
    """protocol.tasks.TaskRegistry over simulated tasks."""

    def __init__(self, tasks: tuple[str, ...] = DEFAULT_TASKS) -> None:
        if not tasks:
            raise ValueError("at least one task is needed")
        self._tasks = tuple(tasks)

    def task_names(self) -> tuple[str, ...]:
        return self._tasks

    def score(self, question: QuestionRef, completion_text: str) -> float:
        if question.task not in self._tasks:
            return 0.0
        text = completion_text.strip()
        if not (text.startswith(_OPEN) and text.endswith(_CLOSE)):
            return 0.0
        answer = text[len(_OPEN) : -len(_CLOSE)].strip()
        return 1.0 if answer == reference_answer(question) else FORMAT_REWARD
