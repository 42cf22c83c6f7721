"""Settings that make a real process fast enough for a test: a tiny trainer with no pre-training
and short completions, on one thread."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from netlab.devnet import FAST_NODE_CONFIG

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
    path.write_text(FAST_NODE_CONFIG)
    return path
