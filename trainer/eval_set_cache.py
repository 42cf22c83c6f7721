"""The held-out evaluation set, remembered on disk: finding it takes seconds, naming it nothing.

`protocol.questions.evaluation_questions` scans evaluation items one by one until each task has
its held-out content keys. Generating an item is usually ~0.1 ms, but not always: at the default eval
seed, number_sequence's item 10_001_269 takes 4.6 s (reasoning-gym retries a rule whose terms
square into integers of millions of digits, then rejects it as uninteresting), and the
validation scan passes it. Every `swarmp2p node` and `swarmp2p train` start paid that before its
first evaluation.

The set is a pure function of (tasks, difficulty, dataset seed, per task, split, the scan's
constants, reasoning-gym's version), so it is stored once per user under
`$XDG_CACHE_HOME/swarmp2p/eval-sets/` and read back on later starts. A stored set is used only
after its questions are regenerated (cheap: ~0.1 ms each) and found to be what was stored: the
same content keys (sha256), each in the split, none twice. Anything else (a missing, unreadable or
corrupt file, another reasoning-gym generating other questions) is a rescan that rewrites the file;
a cache that cannot be written is only a slower start.

The default settings' sets ship with the package (`trainer/shipped/eval-sets/`, written by
`python scripts/ship_tiny.py --write` beside the default tiny model): an empty cache (a new user's
first node) reads them, checked in the same way, instead of scanning (4-7 s on 2 cores).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

from protocol import questions
from protocol.messages import QuestionRef
from trainer import content_keys
from trainer.config import user_cache_root

log = logging.getLogger("trainer.eval_set_cache")

FORMAT = 2
"""Bumped when the file's layout or the meaning of its key changes (2: sets cut by content key)."""
SHIPPED_DIR = Path(__file__).parent / "shipped" / "eval-sets"
"""The default settings' sets, as `store_shipped` writes them."""


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/swarmp2p/eval-sets` (~/.cache/... if unset), beside the built models."""
    return user_cache_root() / "eval-sets"


def _reasoning_gym_version() -> str:
    try:
        return metadata.version("reasoning-gym")
    except metadata.PackageNotFoundError:  # a source checkout without metadata: keys are checked anyway
        return "unknown"


def set_key(tasks: Sequence[str], difficulty: int, dataset_seed: int, per_task: int, split: str) -> str:
    """The file name (hex) of one evaluation set: everything its content depends on."""
    facts = {
        "format": FORMAT,
        "tasks": list(tasks),
        "difficulty": difficulty,
        "dataset_seed": dataset_seed,
        "per_task": per_task,
        "split": split,
        "scan": [questions.EVAL_INDEX_BASE, questions.EVAL_SCAN_LIMIT, questions.EVAL_SCAN_PATIENCE],
        "share": [questions.HELDOUT_SHARE, sorted(questions.HELDOUT_SPLITS.items())],
        "reasoning_gym": _reasoning_gym_version(),
        "content_keys": content_keys.KEY_VERSION,
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


def _keys_digest(keys: Sequence[str]) -> str:
    joined = hashlib.sha256()
    for key in keys:
        joined.update(hashlib.sha256(key.encode()).digest())
    return joined.hexdigest()


def _load(path: Path, split: str, key_of: Callable[[QuestionRef], str]) -> tuple[QuestionRef, ...] | None:
    """The stored set if it regenerates to what was stored, else None (said at debug level)."""
    try:
        stored = json.loads(path.read_text())
        refs = tuple(QuestionRef(str(t), int(s), int(i)) for t, s, i in stored["refs"])
        digest = str(stored["keys_sha256"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.debug("evaluation set cache %s unreadable (%s): rescanning", path, error)
        return None
    keys = [key_of(ref) for ref in refs]
    pairs = zip(refs, keys, strict=True)
    in_split = all(questions.heldout_split(ref.task, key) == split for ref, key in pairs)
    if not in_split or len(set(keys)) != len(keys) or _keys_digest(keys) != digest:
        log.debug("evaluation set cache %s does not match its questions: rescanning", path)
        return None
    return refs


def _store(path: Path, refs: Sequence[QuestionRef], keys: Sequence[str]) -> None:
    """Write atomically (a reader never sees half a file); a failure only costs the next start."""
    named = [[ref.task, ref.dataset_seed, ref.index] for ref in refs]
    body = json.dumps({"refs": named, "keys_sha256": _keys_digest(keys)})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, staging = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    except OSError as error:
        log.debug("evaluation set cache %s not written: %s", path, error)
        return
    try:
        with os.fdopen(handle, "w") as file:
            file.write(body)
        os.replace(staging, path)
    except OSError as error:
        log.debug("evaluation set cache %s not written: %s", path, error)
        with contextlib.suppress(OSError):
            os.unlink(staging)


def cached_evaluation_questions(
    tasks: Sequence[str],
    dataset_seed: int,
    per_task: int,
    key_of: Callable[[QuestionRef], str],
    split: str,
    *,
    difficulty: int,
    cache_dir: Path | None = None,
) -> tuple[QuestionRef, ...]:
    """`protocol.questions.evaluation_questions(...)`, read from `cache_dir` when stored there
    (default `default_cache_dir()`), else scanned and stored. Same result either way."""
    if split not in questions.HELDOUT_SPLITS:  # the scan's own error, before any file is named
        return questions.evaluation_questions(tasks, dataset_seed, per_task, key_of, split)
    name = set_key(tasks, difficulty, dataset_seed, per_task, split)
    path = (cache_dir or default_cache_dir()) / f"{name}.json"
    refs = _load(path, split, key_of)
    if refs is not None:
        return refs
    refs = _load(SHIPPED_DIR / f"{name}.json", split, key_of)  # checked like a cached one
    if refs is None:
        refs = questions.evaluation_questions(tasks, dataset_seed, per_task, key_of, split)
    _store(path, refs, [key_of(ref) for ref in refs])
    return refs


def store_shipped(
    tasks: Sequence[str],
    dataset_seed: int,
    per_task: int,
    key_of: Callable[[QuestionRef], str],
    split: str,
    *,
    difficulty: int,
    into: Path = SHIPPED_DIR,
) -> Path:
    """Scan a set (never read from any cache) and write it where `cached_evaluation_questions`
    looks for shipped sets; returns the file."""
    refs = questions.evaluation_questions(tasks, dataset_seed, per_task, key_of, split)
    path = into / f"{set_key(tasks, difficulty, dataset_seed, per_task, split)}.json"
    _store(path, refs, [key_of(ref) for ref in refs])
    return path
