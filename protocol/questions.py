"""Which questions a peer answers in a round: derived, never chosen.

`questions_for(seed, round, stage, peer_id, tasks, count)` is a pure function of its
inputs built on sha256 (never Python's `hash()`, which is salted per process), so every
peer computes the same assignment for every other peer. That is what lets a receiver
check that a batch answers questions its sender was actually assigned, instead of
questions the sender picked because it already knows the answers.

A question is `QuestionRef(task, dataset_seed, index)`:
- `dataset_seed` depends only on (swarm seed, task), so one dataset per task per swarm;
- training indices lie in [0, TRAIN_INDEX_LIMIT); evaluation indices lie in
  [EVAL_INDEX_BASE, EVAL_INDEX_BASE + EVAL_INDEX_LIMIT), disjoint from training.
- Disjoint indices are not enough (two indices, or two seeds, can generate the same question),
  and neither is disjoint text (two texts can ask the same thing: the same sequence ending, the
  same operands in another order), so held-out-ness is a function of the question's CONTENT KEY
  (`heldout_split`; the trainer computes keys, trainer/content_keys.py): two keys in
  HELDOUT_SHARE are held out, one for the `validation` split and one for the `test` split; every
  peer computes the same split. A held-out question is never assigned for training at all:
  `questions_for` skips it (`exclude`), so every peer re-derives the same assignment.
  Validation is what runs are watched and settings chosen on; test is for reporting a result,
  never for choosing. `evaluation_questions` is the one builder of a held-out set: the trainer
  (trainer/tasks.py) hands it the content keys of its reasoning-gym items.

Draws use the full 256-bit digest modulo the range, so the modulo bias is below 2**-200.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Sequence

import msgpack

from protocol import limits
from protocol.messages import QuestionRef

TRAIN_INDEX_LIMIT = 1_000_000
EVAL_INDEX_BASE = 10_000_000
EVAL_INDEX_LIMIT = 1_000_000

HELDOUT_SHARE = 8
"""Question content keys are cut by hash into HELDOUT_SHARE slices; the slices in HELDOUT_SPLITS are held
out for evaluation and never trained on."""
HELDOUT_SPLITS = {"validation": 0, "test": 1}
"""Held-out split name -> its hash slice. `validation` (the slice held out since the first
evaluation) is what node and train runs report and what defaults were chosen on; `test` was added
once defaults had been chosen on validation, so that a result can be measured on questions no
choice ever looked at."""
EVAL_SCAN_LIMIT = 20_000
"""Evaluation items scanned per task to find the held-out questions."""
EVAL_SCAN_PATIENCE = 3_000
"""...and the scan of a task stops once this many items in a row brought no new held-out text
(a task with a small question space has no more to give)."""

_EXCLUDE_PATIENCE = 64
"""Draws per question before `questions_for` gives up on an `exclude` that refuses everything
(two of HELDOUT_SHARE slices are held out, so a real split needs about 1.3 draws a question)."""

_DATASET_SEED_DOMAIN = "swarmp2p/dataset-seed/v1"
_QUESTION_DOMAIN = "swarmp2p/questions/v1"
_SPECIALTY_DOMAIN = "swarmp2p/specialty/v1"


def _digest_int(*parts: object) -> int:
    # msgpack of a list is an unambiguous, length-prefixed serialization of the parts.
    return int.from_bytes(hashlib.sha256(msgpack.packb(list(parts), use_bin_type=True)).digest(), "big")


def _check_uint(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limits.MAX_UINT63:
        raise ValueError(f"{name} must be an int in [0, 2**63-1], got {value!r}")


def _check_tasks(tasks: Sequence[str]) -> None:
    if isinstance(tasks, str):
        raise ValueError("tasks must be a sequence of task names, not one string")
    if not tasks:
        raise ValueError("tasks must not be empty")
    if len(set(tasks)) != len(tasks):
        raise ValueError("tasks must not contain duplicates (it would skew the task mix)")
    for task in tasks:
        if not isinstance(task, str) or not 0 < len(task.encode("utf-8")) <= limits.MAX_TASK_NAME_BYTES:
            raise ValueError(f"invalid task name {task!r}")


def dataset_seed_for(seed: int, task: str) -> int:
    """The dataset seed of `task` in the swarm with seed `seed` (in [0, 2**63-1])."""
    _check_uint("seed", seed)
    return _dataset_seed(seed, task)


@functools.lru_cache(maxsize=1024)
def _dataset_seed(seed: int, task: str) -> int:
    # Remembered: `questions_for` needs every task's seed on each call, a digest each, and at
    # 1000 simulated peers it is called ~9,000 times a round (each peer's own questions and those
    # of every batch it verifies), always with the swarm's few tasks (0.8% of a round).
    return _digest_int(_DATASET_SEED_DOMAIN, seed, task) % (limits.MAX_UINT63 + 1)


def questions_for(
    seed: int,
    round: int,
    stage: int,
    peer_id: str,
    tasks: Sequence[str],
    count: int,
    weights: Sequence[float] | None = None,
    exclude: Callable[[QuestionRef], bool] | None = None,
) -> tuple[QuestionRef, ...]:
    """The `count` distinct training questions `peer_id` must answer in (round, stage).

    Tasks are drawn uniformly from `tasks`, or in proportion to `weights` when given. The
    order of `tasks` matters (it is part of the swarm's configuration), so callers should
    pass the registry's stable `task_names()`. A draw for which `exclude(ref)` is true (a
    held-out question) is skipped and drawn again, so held-out questions are never assigned;
    every peer passes the same rule (its task registry's `is_heldout`).
    """
    _check_uint("seed", seed)
    _check_uint("round", round)
    _check_uint("stage", stage)
    if not isinstance(peer_id, str) or not peer_id:
        raise ValueError("peer_id must be a non-empty string")
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= limits.MAX_GROUPS_PER_BATCH:
        raise ValueError(f"count must be an int in [0, {limits.MAX_GROUPS_PER_BATCH}], got {count!r}")
    _check_tasks(tasks)
    cumulative = _cumulative_weights(tasks, weights)
    drawable = len(tasks) if cumulative is None else len(cumulative)
    if count > drawable * TRAIN_INDEX_LIMIT:  # only reachable with a tiny index space; never loop forever
        raise ValueError(f"cannot draw {count} distinct questions from {drawable} task(s)")
    seeds = {task: dataset_seed_for(seed, task) for task in tasks}

    chosen: list[QuestionRef] = []
    seen: set[QuestionRef] = set()
    draw = 0
    while len(chosen) < count:  # duplicates are astronomically rare; redraw on one
        value = _digest_int(_QUESTION_DOMAIN, seed, round, stage, peer_id, draw)
        draw += 1
        task = _pick_task(tasks, cumulative, value >> 128)
        ref = QuestionRef(
            task=task, dataset_seed=seeds[task], index=(value & (2**128 - 1)) % TRAIN_INDEX_LIMIT
        )
        if ref in seen:
            continue
        seen.add(ref)
        if exclude is not None and exclude(ref):
            if draw > count * _EXCLUDE_PATIENCE + 64:
                raise ValueError(f"fewer than {count} trainable questions in {draw} draws")
            continue
        chosen.append(ref)
    return tuple(chosen)


def specialty(tasks: Sequence[str], peer_id: str) -> str:
    """The one task `peer_id` answers in a specialised swarm (protocol.game.SingleStageGame
    `specialised`): a pure function of the peer id, so every verifier derives the same."""
    _check_tasks(tasks)
    return tasks[_digest_int(_SPECIALTY_DOMAIN, peer_id) % len(tasks)]


def heldout_split(task: str, key: str) -> str | None:
    """The held-out split (`validation` or `test`) of a question of `task` with content key `key`,
    None for a training question (sha256, never Python's hash)."""
    digest = hashlib.sha256(f"{task}\0{key}".encode()).digest()
    slice_ = int.from_bytes(digest[:8], "big") % HELDOUT_SHARE
    for name, held in HELDOUT_SPLITS.items():
        if slice_ == held:
            return name
    return None


def heldout_key(task: str, key: str) -> bool:
    """Whether a question of `task` with content key `key` is held out (in any split): never
    trained on."""
    return heldout_split(task, key) is not None


def evaluation_questions(
    tasks: Sequence[str],
    dataset_seed: int,
    per_task: int,
    key_of: Callable[[QuestionRef], str],
    split: str = "validation",
) -> tuple[QuestionRef, ...]:
    """The held-out set of `split`: per task, the first `per_task` evaluation items (indices from
    EVAL_INDEX_BASE) whose content key (`key_of(ref)`) is in that split, each key once (so no two
    questions of the set are near-duplicates either). A task whose question space holds fewer
    distinct held-out keys within EVAL_SCAN_LIMIT items (or that brings none new for
    EVAL_SCAN_PATIENCE items in a row) gets fewer."""
    if isinstance(per_task, bool) or not isinstance(per_task, int) or per_task < 0:
        raise ValueError(f"per_task must be a non-negative int, got {per_task!r}")
    if split not in HELDOUT_SPLITS:
        raise ValueError(f"split must be one of {sorted(HELDOUT_SPLITS)}, got {split!r}")
    refs: list[QuestionRef] = []
    for task in tasks:
        keys: set[str] = set()
        last_new = 0
        for offset in range(EVAL_SCAN_LIMIT):
            # Full before the first item too: a set of 0 per task reads no item.
            if len(keys) == per_task or offset - last_new >= EVAL_SCAN_PATIENCE:
                break
            ref = QuestionRef(task, dataset_seed, EVAL_INDEX_BASE + offset)
            key = key_of(ref)
            if key in keys or heldout_split(task, key) != split:
                continue
            last_new = offset
            keys.add(key)
            refs.append(ref)
    return tuple(refs)


def _cumulative_weights(
    tasks: Sequence[str], weights: Sequence[float] | None
) -> list[tuple[str, float]] | None:
    """(task, upper bound of its slice of [0, 1)) for tasks of positive weight; None if uniform."""
    if weights is None:
        return None
    if len(weights) != len(tasks):
        raise ValueError(f"weights has {len(weights)} entries for {len(tasks)} tasks")
    total = 0.0
    cumulative: list[tuple[str, float]] = []
    for task, weight in zip(tasks, weights, strict=True):
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            raise ValueError(f"weights must be finite numbers, got {weight!r}")
        if weight < 0:
            raise ValueError(f"weights must be non-negative, got {weight!r}")
        if weight > 0:
            total += float(weight)
            cumulative.append((task, total))
    if total <= 0:
        raise ValueError("weights must not all be zero")
    return [(task, bound / total) for task, bound in cumulative]


def _pick_task(tasks: Sequence[str], cumulative: list[tuple[str, float]] | None, value: int) -> str:
    if cumulative is None:
        return tasks[value % len(tasks)]
    # 53 random bits -> a float in [0, 1), exactly as random.random() builds one.
    point = (value >> (128 - 53)) / float(1 << 53)
    for task, bound in cumulative:
        if point < bound:
            return task
    # The last bound is 1.0 up to rounding; rounding can leave the point just above it.
    return cumulative[-1][0]
