"""ReasoningGymRegistry: regenerate any named question and score any answer to it, offline.

A question is named by `QuestionRef(task, dataset_seed, index)`. reasoning-gym builds item i of
a dataset from `Random(seed + i)` (checked for every default task, see tests), so item i does
not depend on the dataset's `size`: we build each dataset once per (task, dataset_seed) with a
small size and index it directly, which makes indices of 10_000_000 and more cost nothing.
"""

from __future__ import annotations

import contextlib
import decimal
import random
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

from protocol.messages import QuestionRef
from protocol.questions import TRAIN_INDEX_LIMIT, heldout_key
from trainer.content_keys import content_key
from trainer.eval_set_cache import cached_evaluation_questions
from trainer.quiet_stdout import silenced_stdout
from trainer.rewards import combine, extract_answer, format_score, safe_score


@contextlib.contextmanager
def _isolated_from_process_state() -> Iterator[None]:
    """Run reasoning-gym code with this thread's stdout swallowed and a plain decimal context.

    Some generators and scorers print (bf); only the calling thread is silenced, so the node's
    own output from other threads still shows. And importing vyper (the chain adapter) installs a
    process-wide decimal context that refuses any precision below 78, which makes
    decimal_arithmetic raise; a fresh local context keeps scoring identical whatever else the
    process has imported.
    """
    with silenced_stdout(), decimal.localcontext(decimal.Context()):
        yield


DENIED_TASKS: dict[str, str] = {
    "game_of_life_halting": "reward-hackable: any non-empty answer scores 1.0",
    "codeio": "unsafe: runs exec() and writes files into the working directory",
}

PROMPT_TEMPLATE = (
    "Solve the problem. Think briefly, then give only the final answer between "
    "<answer> and </answer>.\n\nProblem: {question}\n\nResponse:"
)

_ITEM_CACHE_SIZE = 4096
_SAMPLE_PATIENCE = 1000  # a task whose every content key is held out cannot be trained on


class TaskError(ValueError):
    """A task is unknown, denied or failed to generate an item."""


class ReasoningGymRegistry:
    """protocol.tasks.TaskRegistry over reasoning-gym, plus question regeneration and sampling.

    Thread-safe: the node scores from its worker thread while the trainer generates.
    """

    def __init__(
        self,
        tasks: Sequence[str],
        weights: Sequence[float] = (),
        difficulty: int = -1,
        format_weight: float = 0.0,
    ) -> None:
        import reasoning_gym.factory as factory

        self._factory = factory
        names = tuple(tasks)
        if not names:
            raise TaskError("no tasks given")
        for name in names:
            if name in DENIED_TASKS:
                raise TaskError(f"task {name!r} is denied: {DENIED_TASKS[name]}")
            if name not in factory.DATASETS:
                raise TaskError(f"unknown reasoning-gym task {name!r}")
        if weights and len(weights) != len(names):
            raise TaskError(f"{len(weights)} weights for {len(names)} tasks")
        self._names = names
        self._weights = tuple(float(w) for w in weights) if weights else tuple(1.0 for _ in names)
        self._difficulty = difficulty
        self._format_weight = format_weight
        self._datasets: dict[tuple[str, int], Any] = {}
        self._items: OrderedDict[QuestionRef, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._eval_sets: dict[tuple[int, int, str], tuple[QuestionRef, ...]] = {}

    # --- TaskRegistry port ---
    def task_names(self) -> tuple[str, ...]:
        return self._names

    def score(self, question: QuestionRef, completion_text: str) -> float:
        """Reward in [0, 1]. Never raises: an unknown task or a broken item scores 0."""
        try:
            dataset, entry = self._dataset_and_entry(question)
        except Exception:
            return 0.0
        answer = extract_answer(completion_text)
        with _isolated_from_process_state():  # some scorers print
            correctness = safe_score(dataset.score_answer, answer, entry) if answer is not None else 0.0
        if self._format_weight == 0.0:
            return correctness
        return combine(correctness, format_score(completion_text), self._format_weight)

    def correctness(self, question: QuestionRef, answer: str) -> float:
        """The dataset's own score of `answer` (already extracted), in [0, 1]; never raises."""
        try:
            dataset, entry = self._dataset_and_entry(question)
        except Exception:
            return 0.0
        with _isolated_from_process_state():
            return safe_score(dataset.score_answer, answer, entry)

    # --- regeneration ---
    def question(self, ref: QuestionRef) -> tuple[str, str | None]:
        """(prompt text, reference answer) for `ref`. Raises TaskError for unknown or denied tasks."""
        _dataset, entry = self._dataset_and_entry(ref)
        answer = entry.get("answer")
        return PROMPT_TEMPLATE.format(question=entry["question"]), (None if answer is None else str(answer))

    def entry(self, ref: QuestionRef) -> dict[str, Any]:
        return self._dataset_and_entry(ref)[1]

    def sample(
        self,
        rng: random.Random,
        count: int,
        dataset_seed: int,
        index_range: tuple[int, int] = (0, TRAIN_INDEX_LIMIT),
    ) -> list[QuestionRef]:
        """`count` training questions drawn by task weight, indices uniform in `index_range`; a
        held-out question is never drawn (it is redrawn, on the same task)."""
        refs = []
        for task in rng.choices(self._names, weights=self._weights, k=count):
            for _attempt in range(_SAMPLE_PATIENCE):
                ref = QuestionRef(task, dataset_seed, rng.randrange(*index_range))
                if not self.is_heldout(ref):
                    refs.append(ref)
                    break
            else:
                raise TaskError(f"{task}: no trainable question in {_SAMPLE_PATIENCE} draws")
        return refs

    def content_key(self, ref: QuestionRef) -> str:
        """The content key of `ref`'s question (trainer/content_keys.py). Raises TaskError."""
        return content_key(ref.task, self._dataset_and_entry(ref)[1])

    def is_heldout(self, ref: QuestionRef) -> bool:
        """Whether `ref`'s question falls in the held-out share of its task's content keys.

        The split is by content, not by seed, index or text: two seeds can generate the same
        question, and two texts can ask the same thing (the same sequence ending, the same
        operands), so held-out-ness is a pure function of (task, content key). Evaluation uses
        only held-out questions; the swarm never assigns them for training (protocol.questions:
        `questions_for(..., exclude=registry.is_heldout)`), pre-training, the tokenizer corpus and
        GRPO updates skip them, whichever seed produced them. Every peer computes the same split.
        A question that cannot be generated counts as held out: it is never trained on either."""
        try:
            key = self.content_key(ref)
        except TaskError:
            return True
        return heldout_key(ref.task, key)

    def eval_questions(
        self, per_task: int, dataset_seed: int, split: str = "validation"
    ) -> list[QuestionRef]:
        """The held-out set of protocol.questions.evaluation_questions over this registry's tasks
        and content keys (per task, the first `per_task` held-out keys of `split`). Memoized,
        and remembered on disk across processes (trainer/eval_set_cache.py)."""
        key = (per_task, dataset_seed, split)
        if key not in self._eval_sets:
            # Read from the user's cache when stored: the scan can take seconds (eval_set_cache.py).
            self._eval_sets[key] = cached_evaluation_questions(
                self._names,
                dataset_seed,
                per_task,
                self.content_key,
                split,
                difficulty=self._difficulty,
            )
        return list(self._eval_sets[key])

    # --- internals ---
    def _dataset(self, task: str, dataset_seed: int) -> Any:
        key = (task, dataset_seed)
        dataset = self._datasets.get(key)
        if dataset is not None:
            return dataset
        if task in DENIED_TASKS:
            raise TaskError(f"task {task!r} is denied: {DENIED_TASKS[task]}")
        if task not in self._names:
            raise TaskError(f"task {task!r} is not in this registry's task list")
        with _isolated_from_process_state():
            if self._difficulty >= 0 and task in self._factory.CURRICULA:
                curriculum = self._factory.create_curriculum(task)
                curriculum.set_global_level(self._difficulty)
                config = curriculum.generate_configuration({"seed": dataset_seed, "size": 1})
                dataset_cls, _config_cls = self._factory.DATASETS[task]
                dataset = dataset_cls(config=config)
            else:
                dataset = self._factory.create_dataset(task, seed=dataset_seed, size=1)
        self._datasets[key] = dataset
        return dataset

    def _dataset_and_entry(self, ref: QuestionRef) -> tuple[Any, dict[str, Any]]:
        if not isinstance(ref.index, int) or ref.index < 0:
            raise TaskError(f"bad question index {ref.index!r}")
        with self._lock:
            dataset = self._dataset(ref.task, ref.dataset_seed)
            entry = self._items.get(ref)
            if entry is not None:
                self._items.move_to_end(ref)
                return dataset, entry
            try:
                with _isolated_from_process_state():  # bf prints while generating
                    entry = dataset[ref.index]
            except Exception as error:
                raise TaskError(f"{ref.task}[{ref.index}] failed to generate: {error}") from error
            self._items[ref] = entry
            if len(self._items) > _ITEM_CACHE_SIZE:
                self._items.popitem(last=False)
            return dataset, entry
