"""Settings that make a real process fast enough for a test: a tiny trainer with no pre-training
and short completions, on one thread."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

# A tiny, fast trainer: no pre-training, short completions, one thread.
TRAINER_TOML = textwrap.dedent(
    """
    [trainer]
    tasks = ["basic_arithmetic", "calendar_arithmetic"]
    tiny_hidden_size = 64
    tiny_pretrain_steps = 0
    threads = 1
    max_new_tokens = 16
    num_generations = 4
    format_reward = 0.5
    eval_questions = 2
    seed = 3
    """
)


def write_fast_node_config(path: Path) -> Path:
    """A node config small enough for several real nodes on two cores (chain and devnet tests)."""
    path.write_text(
        """
[node]
questions_per_round = 2
n_local = 2
n_external = 2
hello_interval_s = 2.0

[trainer]
tasks = ["basic_arithmetic"]
threads = 1
format_reward = 0.5
max_new_tokens = 16
tiny_hidden_size = 32
tiny_pretrain_steps = 0
"""
    )
    return path
