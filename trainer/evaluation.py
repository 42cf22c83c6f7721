"""Held-out evaluation: a fixed question set no training step ever sees, answered once each.

The reference recipe's settings: completions sampled at temperature 0.6 with top-p 0.95 (not
greedy: it is how the model is used, and greedy hides a policy that is right only on its single
most likely path). The sampler is seeded from `eval_seed` at every call, so
the same model gives the same result, and evaluating never moves the training sampler. The recipe
scores one completion per question; `eval_samples` = k > 1 scores k and reports their mean, the same
expected accuracy with k times less sampling variance (a set of ~80 questions answered once moves
by +-0.04 between two evaluations of one model with different sampler seeds).

Disjoint by construction: held-out items are `QuestionRef(task, eval_seed, EVAL_INDEX_BASE + i)`;
training indices are below TRAIN_INDEX_LIMIT and pre-training drops any item whose question text
is in the held-out set (trainer/pretrain.py). tests/trainer/test_trainer_evaluation.py checks both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from protocol.messages import QuestionRef
from trainer.config import TrainerConfig
from trainer.intervals import Interval, gain_interval, mean_interval
from trainer.rewards import extract_answer
from trainer.tasks import ReasoningGymRegistry

CORRECT = 0.999  # a correctness score at or above this counts as a right answer


def eval_questions(
    registry: ReasoningGymRegistry, config: TrainerConfig, split: str | None = None
) -> list[QuestionRef]:
    """The fixed held-out set of `split` (default: `config.eval_split`)."""
    return registry.eval_questions(config.eval_questions, config.eval_seed, split or config.eval_split)


def eval_due(config: TrainerConfig, updates: int, last_eval_at: int | None) -> bool:
    """`evaluation_due` with the [trainer] settings (`swarmp2p train` counts steps)."""
    return evaluation_due(
        every=config.eval_every, before_train=config.eval_before_train, updates=updates, last_at=last_eval_at
    )


def evaluation_due(*, every: int, before_train: bool, updates: int, last_at: int | None) -> bool:
    """Whether an evaluation is due after `updates` updates (steps or rounds), the previous one
    having run after `last_at` updates (None: never). `every` = 0: never. The one schedule rule:
    `swarmp2p train` (steps) and the node's round loop (swarmp2p/heldout.py, rounds) both use it."""
    if every <= 0:
        return False
    if last_at is None:
        return before_train or updates >= every
    return updates - last_at >= every


def summarize(
    registry: ReasoningGymRegistry,
    refs: Sequence[QuestionRef],
    texts: Sequence[str],
    generations_to_log: int,
    samples_per_question: int = 1,
) -> dict[str, Any]:
    """Accuracy (correct answers, format ignored) and mean reward (the swarm's reward, format
    included) per task and overall. Overall weighs every question alike (correct answers over
    all questions): a task's held-out split can be small (leg_counting has 8 questions at
    difficulty 0, where one question would move a mean over tasks by 6 points). The mean over
    tasks is kept beside it as `task_mean_accuracy`.

    `texts` holds `samples_per_question` completions per question, question-major; accuracy is
    their mean, i.e. the expected accuracy of one completion, measured with less sampling noise."""
    k = samples_per_question
    if len(texts) != len(refs) * k:
        raise ValueError(f"{len(texts)} completions for {len(refs)} questions x {k} samples")
    per_task: dict[str, dict[str, float]] = {}
    samples = []
    per_question = [0.0] * len(refs)
    for position, text in enumerate(texts):
        ref = refs[position // k]
        correct = correctness(registry, ref, text) >= CORRECT
        per_question[position // k] += int(correct) / k
        reward = registry.score(ref, text)
        stats = per_task.setdefault(ref.task, {"n": 0, "correct": 0, "reward_sum": 0.0})
        stats["n"] += 1
        stats["correct"] += int(correct)
        stats["reward_sum"] += reward
        if len(samples) < generations_to_log and position % k == 0:
            _prompt, answer = registry.question(ref)
            samples.append(
                {
                    "task": ref.task,
                    "index": ref.index,
                    "completion": text,
                    "reference": answer,
                    "correct": correct,
                    "reward": reward,
                }
            )
    tasks = {
        task: {
            "accuracy": stats["correct"] / stats["n"],
            "reward": stats["reward_sum"] / stats["n"],
            "n": stats["n"] // k,
        }
        for task, stats in per_task.items()
    }
    samples_total = sum(stats["n"] for stats in per_task.values())
    return {
        "accuracy": sum(stats["correct"] for stats in per_task.values()) / samples_total,
        # 95% bootstrap interval over questions; `per_question` (in the set's fixed order) is what
        # a gain is paired on (trainer/intervals.py)
        "accuracy_interval": mean_interval(per_question).as_dict(),
        "per_question": per_question,
        "reward": sum(stats["reward_sum"] for stats in per_task.values()) / samples_total,
        "task_mean_accuracy": sum(t["accuracy"] for t in tasks.values()) / len(tasks),
        "questions": len(refs),
        "per_task": tasks,
        "samples": samples,
    }


def correctness(registry: ReasoningGymRegistry, ref: QuestionRef, text: str) -> float:
    """The dataset's own score of the answer inside <answer>...</answer> (0 without one)."""
    answer = extract_answer(text)
    if answer is None:
        return 0.0
    return registry.correctness(ref, answer)


def evaluate(
    registry: ReasoningGymRegistry,
    config: TrainerConfig,
    answer: Callable[[Sequence[QuestionRef], int], list[str]],
    step: int,
    split: str | None = None,
) -> dict[str, Any]:
    """Answer the held-out set of `split` (default: `config.eval_split`) with `answer(refs, k)`
    (k texts per question, question-major, k = `eval_samples`) and summarize."""
    started = time.perf_counter()
    split = split or config.eval_split
    refs = eval_questions(registry, config, split)
    texts = answer(refs, config.eval_samples)
    result = {
        "step": step,
        **summarize(registry, refs, texts, config.eval_generations_to_log, config.eval_samples),
        "samples_per_question": config.eval_samples,
        "split": split,
    }
    result["seconds"] = time.perf_counter() - started
    return result


AnswerUnit = Callable[[Sequence[QuestionRef], int, Any], tuple[list[str], Any]]
"""`answer_unit(refs, k, sampler_state) -> (texts, sampler_state after)`: one generation batch
answered from a given sampler state (None: seeded afresh from `eval_seed`)."""


def unit_ranges(questions: int, samples: int, chunk: int) -> list[range]:
    """The held-out set's generation batches: `chunk` completions each (at least one question),
    in the set's fixed order. A whole evaluation answers them one after the other."""
    per_batch = max(1, chunk // samples)
    return [range(start, min(start + per_batch, questions)) for start in range(0, questions, per_batch)]


class SlicedEvaluation:
    """One held-out evaluation answered a generation batch (a unit) at a time, so that it can run
    in the worker's spare moments of several rounds: `answer_next()` answers the next unit with
    the weights of the moment, `result()` summarizes once every unit is answered.

    Same questions, same sampling: the units are the batches a whole evaluation answers, in the
    same order, and each starts from the sampler state the previous one left (the first from
    `eval_seed`), so with unchanged weights the texts, the per-question results and the interval
    over questions are those of `evaluate()`. What differs is only the weights: each unit notes
    the step it was answered at (`result()["slices"]`). A unit stopped part-way (a cancel raised
    out of `answer_unit`) leaves no trace: the next call answers it again from the same state."""

    def __init__(
        self,
        registry: ReasoningGymRegistry,
        config: TrainerConfig,
        answer_unit: AnswerUnit,
        step: Callable[[], int],
        chunk: int,
        split: str | None = None,
    ) -> None:
        self.registry = registry
        self.config = config
        self.split = split or config.eval_split
        self.refs = eval_questions(registry, config, self.split)
        self.units = unit_ranges(len(self.refs), config.eval_samples, chunk)
        self._answer_unit = answer_unit
        self._step = step
        self._texts: list[str] = []
        self._state: Any = None
        self._state_before_last: Any = None
        self.unit_steps: list[int] = []
        """The policy's step when each answered unit ran (its weights), in unit order."""
        self.unit_seconds: list[float] = []

    @property
    def done(self) -> int:
        """Units answered so far."""
        return len(self.unit_steps)

    @property
    def complete(self) -> bool:
        return self.done == len(self.units)

    def answer_next(self) -> int:
        """Answer the next unit with the current weights; returns how many questions it held."""
        if self.complete:
            raise RuntimeError("every unit of this evaluation is answered")
        started = time.perf_counter()
        unit = self.units[self.done]
        refs = self.refs[unit.start : unit.stop]
        texts, state = self._answer_unit(refs, self.config.eval_samples, self._state)
        if len(texts) != len(refs) * self.config.eval_samples:
            raise ValueError(f"{len(texts)} completions for {len(refs)} questions")
        self._texts.extend(texts)
        self._state, self._state_before_last = state, self._state
        self.unit_steps.append(self._step())
        self.unit_seconds.append(time.perf_counter() - started)
        return len(refs)

    def drop_last(self) -> None:
        """Forget the last answered unit (it ran past its deadline and does not count): the
        next `answer_next()` answers it again from the same sampler state."""
        unit = self.units[self.done - 1]
        del self._texts[-len(unit) * self.config.eval_samples :]
        self._state = self._state_before_last
        self.unit_steps.pop()
        self.unit_seconds.pop()

    def result(self) -> dict[str, Any]:
        """The evaluation's result, as `evaluate()` gives it, labelled with the step of its last
        unit; `slices` says which steps' weights answered how many questions."""
        if not self.complete:
            raise RuntimeError(f"{self.done} of {len(self.units)} units answered")
        config = self.config
        slices: list[dict[str, int]] = []
        for unit, step in zip(self.units, self.unit_steps, strict=True):
            if slices and slices[-1]["step"] == step:
                slices[-1]["questions"] += len(unit)
            else:
                slices.append({"step": step, "questions": len(unit)})
        return {
            "step": self.unit_steps[-1],
            **summarize(
                self.registry, self.refs, self._texts, config.eval_generations_to_log, config.eval_samples
            ),
            "samples_per_question": config.eval_samples,
            "split": self.split,
            "seconds": sum(self.unit_seconds),
            "slices": slices,
        }


def gain(before: dict[str, Any], after: dict[str, Any]) -> Interval:
    """The held-out gain from evaluation `before` to `after` of the same set, with its 95%
    bootstrap interval over questions (paired: each question against itself)."""
    if before.get("split") != after.get("split") or before.get("questions") != after.get("questions"):
        raise ValueError("a gain compares two evaluations of the same held-out set")
    return gain_interval(before["per_question"], after["per_question"])
