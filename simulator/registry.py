"""A cheap deterministic task registry for the simulator (no reasoning-gym, no torch).

Each question `(task, dataset_seed, index)` has a reference answer derived from blake2b, so any
peer regenerates it exactly as `trainer.tasks.ReasoningGymRegistry` regenerates a real item.
Scoring mirrors the shape of real rewards: a well-formatted correct answer earns 1.0, a
well-formatted wrong answer earns the swarm's format reward (FORMAT_REWARD by default; learning
the format is the first thing a small model picks up), anything else earns 0.0. It never raises.
"""

from __future__ import annotations

import functools
import hashlib

from protocol.messages import QuestionRef, SwarmSchedule

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
    """protocol.tasks.TaskRegistry over simulated tasks.

    `format_reward`: what a well-formatted wrong answer earns (the swarm's `format_reward` rule;
    the same shape as the real registry's (1 - w) * correctness + w * format)."""

    def __init__(self, tasks: tuple[str, ...] = DEFAULT_TASKS, format_reward: float = FORMAT_REWARD) -> None:
        if not tasks:
            raise ValueError("at least one task is needed")
        if not 0.0 <= format_reward <= 1.0:
            raise ValueError(f"format_reward must be in [0, 1], got {format_reward!r}")
        self._tasks = tuple(tasks)
        self.format_reward = format_reward

    @classmethod
    def for_schedule(cls, schedule: SwarmSchedule) -> SimTaskRegistry:
        """The registry that scores by the swarm's rules (its tasks and format reward)."""
        return cls(schedule.tasks, schedule.format_reward)

    def task_names(self) -> tuple[str, ...]:
        return self._tasks

    def is_heldout(self, question: QuestionRef) -> bool:
        """Simulated answers are digests with no content to memorise: nothing is held out."""
        return False

    def score(self, question: QuestionRef, completion_text: str) -> float:
        if question.task not in self._tasks:
            return 0.0
        text = completion_text.strip()
        if not (text.startswith(_OPEN) and text.endswith(_CLOSE)):
            return 0.0
        answer = text[len(_OPEN) : -len(_CLOSE)].strip()
        return 1.0 if answer == reference_answer(question) else self.format_reward
