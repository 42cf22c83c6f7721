"""Held-out evaluation results remembered on disk, keyed by everything that decides them.

An evaluation is a function of the weights, the held-out questions and the settings that sample
and score the answers: trainer/evaluation.py seeds its sampler from `eval_seed` at every call, so
the same model always gets the same result. A node evaluates its model once before it joins, and
every new data dir starts from the same base: with the tiny model that was 1.5-2 s of a 10 s
start-up on 2 cores, with a 0.5B model on a CPU it is many minutes, each time the same answers.

So the evaluation before joining (`TrainerPolicy.evaluate_remembered`) looks here first. The key
is a sha256 over: the weights (every tensor's name, dtype, shape and bytes), the whole trainer
config except what only places or schedules things (EXCLUDED), the device and torch's thread count
(float kernels can differ with either), and the versions of torch, transformers, reasoning-gym and
swarmp2p. Any difference is a miss and a real evaluation. Files live in
`$XDG_CACHE_HOME/swarmp2p/eval-results/` (newest KEEP kept); one that cannot be read is a miss, one
that cannot be written only costs the next start its evaluation.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import attrs

from trainer.config import TrainerConfig, user_cache_root

log = logging.getLogger("trainer.eval_results")

FORMAT = 2
"""Bumped when the key's meaning or the file's layout changes (2: results carry `per_question`)."""
KEEP = 256
"""Result files kept (the newest); each is a few KB."""
EXCLUDED = frozenset(
    {
        "data_dir",  # where this node keeps its state
        "model_cache",  # where built models are kept
        "tensorboard",
        "wandb",
        "checkpoint_keep",
        "eval_every",  # when evaluations run, not what they answer
        "eval_before_train",
        "seed",  # the training seed: evaluation samples from `eval_seed` (in the key)
    }
)
PACKAGES = ("torch", "transformers", "reasoning-gym", "swarmp2p")


def default_cache_dir() -> Path:
    return user_cache_root() / "eval-results"


def weights_digest(model: Any) -> str:
    """sha256 over every tensor of `model`'s state dict: name, dtype, shape and bytes."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}\x1f{flat.dtype}\x1f{tuple(tensor.shape)}\x1e".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def result_key(model: Any, config: TrainerConfig, split: str, device: str) -> str:
    """The file name (hex) of one evaluation's result: everything the result depends on."""
    import torch

    settings = {k: v for k, v in attrs.asdict(config).items() if k not in EXCLUDED}
    facts = {
        "format": FORMAT,
        "weights": weights_digest(model),
        "config": settings,
        "split": split,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "versions": {package: _version(package) for package in PACKAGES},
    }
    blob = json.dumps(facts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def load(key: str, cache_dir: Path | None = None) -> dict[str, Any] | None:
    """The remembered result for `key`, or None (not stored, unreadable, or another key's)."""
    path = (cache_dir or default_cache_dir()) / f"{key}.json"
    try:
        stored = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        log.warning("remembered evaluation %s unreadable (%s): evaluating", path.name, error)
        return None
    if not isinstance(stored, dict) or stored.get("key") != key or not isinstance(stored.get("result"), dict):
        log.warning("remembered evaluation %s is not one: evaluating", path.name)
        return None
    return stored["result"]


def store(key: str, result: dict[str, Any], cache_dir: Path | None = None) -> None:
    """Remember `result` under `key` (atomically); keep the newest KEEP files. Never raises."""
    folder = cache_dir or default_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False) as handle:
            json.dump({"key": key, "result": result}, handle)
        os.replace(handle.name, folder / f"{key}.json")
        files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[KEEP:]:
            with contextlib.suppress(OSError):
                old.unlink()
    except OSError as error:
        log.warning("could not remember the evaluation in %s: %s", folder, error)
