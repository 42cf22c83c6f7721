"""Resume after SIGKILL mid-training continues from the last checkpoint with identical optimizer state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from trainer import checkpoint
from trainer.config import TrainerConfig

TRAINER_SCRIPT = """
import random, sys
from trainer.config import TrainerConfig
from trainer.policy import TrainerPolicy
config = TrainerConfig(data_dir=sys.argv[1], tasks=("basic_arithmetic",), tiny_hidden_size=64,
                       tiny_pretrain_steps=0, threads=1, max_new_tokens=16, format_reward=1.0,
                       checkpoint_keep=2, seed=5)
policy = TrainerPolicy(config)
rng = random.Random(0)
for _ in range(10_000):
    metrics = policy.train(policy.generate(policy.registry.sample(rng, 4, config.seed)))
    if metrics["updated"]:
        policy.save()
        print("saved", policy.step, flush=True)
"""


def _flatten(value: object) -> list[object]:
    if isinstance(value, dict):
        return [x for key in sorted(value, key=str) for x in [key, *_flatten(value[key])]]
    if isinstance(value, list | tuple):
        return [x for item in value for x in _flatten(item)]
    return [value]


def _same(a: object, b: object) -> bool:
    flat_a, flat_b = _flatten(a), _flatten(b)
    if len(flat_a) != len(flat_b):
        return False
    for x, y in zip(flat_a, flat_b, strict=True):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and torch.equal(x, y)):
                return False
        elif x != y:
            return False
    return True


@pytest.mark.slow
def test_resume_after_sigkill_restores_optimizer_state_and_continues(tmp_path: Path) -> None:
    from trainer.policy import TrainerPolicy

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-c", TRAINER_SCRIPT, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 180
        saved = 0
        assert process.stdout is not None
        while saved < 4 and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            if line.startswith("saved"):
                saved = int(line.split()[1])
        assert saved >= 4, (
            f"trainer never reached 4 checkpoints: {process.stderr.read() if process.stderr else ''}"
        )
        time.sleep(0.05)  # land inside the next step (or its save) before killing
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL

    config = TrainerConfig(
        data_dir=str(tmp_path),
        tasks=("basic_arithmetic",),
        tiny_hidden_size=64,
        tiny_pretrain_steps=0,
        threads=1,
        max_new_tokens=16,
        format_reward=1.0,
        checkpoint_keep=2,
        seed=5,
    )
    on_disk = checkpoint.list_checkpoints(config.checkpoint_dir)
    assert len(on_disk) == 2  # keep-K held even across the kill
    last_step, last_path = on_disk[-1]
    assert last_step >= 4
    saved_state = checkpoint.read_checkpoint(last_path)

    policy = TrainerPolicy(config)  # a new process's view: fresh model, fresh optimizer
    assert policy.load() is True
    assert policy.step == last_step
    assert _same(policy.optimizer.state_dict(), saved_state["optimizer"])
    assert all(torch.equal(v, saved_state["model"][k]) for k, v in policy.model.state_dict().items())

    import random

    rng = random.Random(1)
    for _ in range(20):
        metrics = policy.train(policy.generate(policy.registry.sample(rng, 4, config.seed)))
        if metrics["updated"]:
            break
    assert policy.step == last_step + 1
    policy.save()
    assert checkpoint.list_checkpoints(config.checkpoint_dir)[-1][0] == last_step + 1
    # Adam's step counters moved on from the restored ones
    steps = [s["step"] for s in policy.optimizer.state_dict()["state"].values()]
    assert all(float(s) == float(last_step + 1) for s in steps)
