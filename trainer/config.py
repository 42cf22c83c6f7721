"""TrainerConfig: every knob of the GRPO trainer, as plain typed fields.

The lead's config loader fills this from the `[trainer]` section of the node's TOML file, so
every field is a plain type (str, int, float, bool, tuple) with an attrs validator that turns a
wrong value into a one-line error at construction time, not a crash mid-training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
from attrs import validators as v

DEFAULT_TASKS: tuple[str, ...] = ("leg_counting",)
"""At difficulty 1 (DEFAULT_DIFFICULTY): the legs of one or two kinds of animal, 2 to 8 of each
("how many legs if you have 4 tigers, 3 spiders?"). Chosen (2026-12-01) because GRPO's held-out gain
on it is on questions new in content (trainer/content_keys.py: no pre-training or training question
shares the animals and counts of a held-out one): on the validation split a two-task probe with
chain_sum at the same difficulty took leg_counting from 0.08 to 0.20-0.21 in 100-125 steps (two
seeds) while chain_sum (two-digit sums) stayed at 0.01-0.03, and the base's pass@8 on leg_counting
(0.50 at temperature 0.6) is five times its pass@1 (0.10): headroom GRPO can close. The previous
defaults (leg_counting and number_sequence at difficulty 0) had 11 content-distinct leg_counting
test questions and number_sequence at pass@1 0.02 on content-new sequences: nothing to learn that
generalises (docs/trainer.md). Any reasoning-gym task list can be configured instead."""
DEFAULT_DIFFICULTY = 1

LOSS_AGGREGATIONS = ("token", "sequence")
BEHAVIOUR_CORRECTIONS = ("none", "tis")


def user_cache_root() -> Path:
    """swarmp2p's per-user cache: `$XDG_CACHE_HOME/swarmp2p` (~/.cache/swarmp2p if unset)."""
    import os

    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "swarmp2p"


def user_model_cache() -> str:
    """The per-user cache of built models: `user_cache_root()/models`."""
    return str(user_cache_root() / "models")


def _device(instance: object, attribute: attrs.Attribute, value: str) -> None:
    from trainer.device import parse_device

    if parse_device(value) != value:  # raises DeviceError (a ValueError) for a non-device
        raise ValueError(f"write the device as {parse_device(value)!r}, got {value!r}")


def _dtype(instance: object, attribute: attrs.Attribute, value: str) -> None:
    from trainer.precision import parse_precision

    if parse_precision(value) != value:  # raises PrecisionError (a ValueError) for a non-choice
        raise ValueError(f"write the dtype as {parse_precision(value)!r}, got {value!r}")


def _positive(_instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if value <= 0:
        raise ValueError(f"trainer.{attribute.name} must be > 0, got {value!r}")


def _non_negative(_instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if value < 0:
        raise ValueError(f"trainer.{attribute.name} must be >= 0, got {value!r}")


def _at_least_one(_instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not value >= 1.0:  # written so that NaN fails too
        raise ValueError(f"trainer.{attribute.name} must be >= 1, got {value!r}")


def _unit_interval(_instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"trainer.{attribute.name} must be in [0, 1], got {value!r}")


def _tuple_of_str(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return tuple(value)


def _tuple_of_float(value: Any) -> tuple[float, ...]:
    if isinstance(value, str):
        return tuple(float(part) for part in value.split(",") if part.strip())
    return tuple(float(x) for x in value)


@attrs.frozen
class TrainerConfig:
    """Configuration of one peer's trainer. Defaults are cheap enough for a 2-core CPU."""

    # --- model ---
    model: str = attrs.field(default="tiny", validator=v.instance_of(str))
    """"tiny" (built offline, cached in data_dir), a Hugging Face model id, or a local folder."""
    data_dir: str = attrs.field(default=".swarmp2p", converter=str)
    """Checkpoints, the tiny model cache and evaluation logs live under this folder."""
    model_cache: str = attrs.field(default="", converter=str)
    """Where the built tiny model is cached; "" = `<data_dir>/models`. `swarmp2p node` and `train`
    default to the user's cache (`user_model_cache()`), so every data dir on a machine shares one
    build instead of pre-training its own."""
    device: str = attrs.field(default="auto", converter=str, validator=_device)
    """auto (cuda, else mps, else cpu), cpu, cuda, cuda:N (N as this process numbers them: after
    CUDA_VISIBLE_DEVICES) or mps. bf16 only on a CUDA device that supports it (trainer/device.py)."""
    dtype: str = attrs.field(default="auto", converter=str, validator=_dtype)
    """Numeric precision (trainer/precision.py). Weights are always fp32 (AdamW would round small
    updates of bf16 weights away); "auto" computes under bf16 autocast on a CUDA device with bf16
    tensor cores and in fp32 elsewhere; "fp32"; "bf16-autocast" (refused on older GPUs and MPS;
    allowed on CPU, where it is slower: for checking numerics)."""
    threads: int = attrs.field(default=0, validator=[v.instance_of(int), _non_negative])
    """CPU threads for torch; 0 = all cores."""
    tiny_hidden_size: int = attrs.field(default=128, validator=[v.instance_of(int), _positive])
    tiny_layers: int = attrs.field(default=4, validator=[v.instance_of(int), _positive])
    tiny_vocab_size: int = attrs.field(default=1024, validator=[v.instance_of(int), _positive])
    tiny_pretrain_steps: int = attrs.field(default=800, validator=[v.instance_of(int), _non_negative])
    """Supervised pre-training steps of a freshly built tiny model (trainer/pretrain.py); 0 = random
    weights. Part of the cache key: changing it builds a new model."""

    tiny_seed: int = attrs.field(default=0, validator=v.instance_of(int))
    """Seed of the tiny model's build (tokenizer corpus order, initial weights, pre-training). Not
    `seed`: peers and runs with different training seeds start from the same base model, like
    real swarms that all download one checkpoint."""
    tiny_pretrain_noise: float = attrs.field(default=0.6, converter=float, validator=_unit_interval)
    """Share of pre-training answers replaced by a near miss (an integer answer moved by 1 or 2):
    the base learns to put the right answer first but samples near misses often, like an instruct
    model whose pass@8 far exceeds its pass@1, the gap GRPO closes. With clean answers the base is
    stronger but GRPO no longer raises its held-out accuracy; 0.6 (2026-11-25, chosen on validation
    over 0.5) leaves GRPO about twice the validation gain (docs/trainer.md)."""

    # --- rollouts ---
    num_generations: int = attrs.field(default=8, validator=[v.instance_of(int), _positive])
    """G: completions per question (one GRPO group)."""
    max_new_tokens: int = attrs.field(default=48, validator=[v.instance_of(int), _positive])
    max_prompt_tokens: int = attrs.field(default=384, validator=[v.instance_of(int), _positive])
    """Longer prompts keep their last tokens (where the instruction and answer cue are)."""
    temperature: float = attrs.field(default=1.0, converter=float, validator=_positive)
    stop_at_answer: bool = attrs.field(default=False, validator=v.instance_of(bool))
    """End a completion at its first `</answer>` (EOS follows): no reward reads past it, and a
    model that writes on after its answer (a base model until it meets its own EOS) would spend
    the rest of `max_new_tokens` on it. Local: peers score completions by their text alone. Off by
    default: the tiny model writes EOS right after the tag, so it saves one step per completion
    there (4%), and every figure in the docs was measured without it (docs/trainer.md)."""

    # --- GRPO ---
    lr: float = attrs.field(default=3e-4, converter=float, validator=_positive)
    lr_decay_steps: int = attrs.field(default=0, validator=[v.instance_of(int), _non_negative])
    """> 0: the learning rate follows a cosine from `lr` down to 10% of it over this many updates, then
    stays there (`swarmp2p train` sets it to its `--steps`, so a run ends on small, careful steps);
    0: constant (a node trains for as long as it runs)."""
    weight_decay: float = attrs.field(default=0.0, converter=float, validator=_non_negative)
    clip_eps_low: float = attrs.field(default=0.2, converter=float, validator=_non_negative)
    clip_eps_high: float = attrs.field(default=0.28, converter=float, validator=_non_negative)
    beta: float = attrs.field(default=0.0, converter=float, validator=_non_negative)
    """KL coefficient to the frozen initial model; 0 skips the reference model entirely."""
    kl_ratio_correction: bool = attrs.field(default=True, validator=v.instance_of(bool))
    """Multiply the per-token KL by the importance ratio (unbiased reverse-KL gradient; TRL's default)."""
    loss_aggregation: str = attrs.field(default="token", validator=v.in_(LOSS_AGGREGATIONS))
    """"token": mean over all completion tokens of the batch (TRL "dapo");
    "sequence": mean per sequence, then over sequences (TRL "grpo")."""
    behaviour_correction: str = attrs.field(default="tis", validator=v.in_(BEHAVIOUR_CORRECTIONS))
    """"tis": weight each token of a completion that carries its sampling log-probs by the truncated
    importance weight min(exp(logp_old - logp_sampled), behaviour_cap): another peer's text was
    sampled by another policy (Yao et al. 2025; TRL's vLLM importance-sampling correction);
    "none": train on every completion as if this peer had sampled it (ratio one)."""
    behaviour_cap: float = attrs.field(default=2.0, converter=float, validator=_at_least_one)
    """The truncation C of `behaviour_correction = "tis"` (TRL's former vllm_importance_sampling_cap
    default). At least 1, so that a token sampled by this very policy keeps weight exactly 1."""
    max_grad_norm: float = attrs.field(default=1.0, converter=float, validator=_positive)
    micro_batch_size: int = attrs.field(default=0, validator=[v.instance_of(int), _non_negative])
    """Sequences per forward/backward chunk in train(); 0 = the whole batch at once."""

    # --- checkpoints & evaluation ---
    checkpoint_keep: int = attrs.field(default=3, validator=[v.instance_of(int), _positive])
    eval_every: int = attrs.field(default=0, validator=[v.instance_of(int), _non_negative])
    """Held-out evaluation every this many updates (`train`: GRPO steps; `node` and the simulator:
    rounds); 0 = never on a schedule (still run by `eval_before_train`)."""
    eval_before_train: bool = attrs.field(default=True, validator=v.instance_of(bool))
    """Evaluate once before the first update (when `eval_every > 0`), the curve's starting point."""
    eval_questions: int = attrs.field(default=100, validator=[v.instance_of(int), _positive])
    """Held-out questions per task. The set is fixed: the same questions at every evaluation."""
    eval_samples: int = attrs.field(default=4, validator=[v.instance_of(int), _positive])
    """Completions per held-out question; accuracy is their mean (the expected accuracy of one
    completion, the recipe's measure, with k times less sampling variance)."""
    eval_report_samples: int = attrs.field(default=16, validator=[v.instance_of(int), _positive])
    """Completions per question when `swarmp2p train` evaluates the test split for its reported
    figure (the start and the chosen weights): 16, so that the figure's interval is over questions
    rather than sampling noise (4 samples moved the base's test accuracy by 0.026)."""
    eval_generations_to_log: int = attrs.field(default=3, validator=[v.instance_of(int), _non_negative])
    """Sample generations kept with each evaluation result (metrics, status, round line)."""
    eval_temperature: float = attrs.field(default=0.6, converter=float, validator=_non_negative)
    eval_top_p: float = attrs.field(default=0.95, converter=float, validator=_unit_interval)
    eval_split: str = attrs.field(default="validation", validator=v.in_(("validation", "test")))
    """Which held-out split is evaluated: `validation` (what runs are watched and settings chosen
    on) or `test` (for reporting a result: questions no choice of settings ever looked at)."""
    eval_seed: int = attrs.field(default=20261123, validator=v.instance_of(int))
    """Seeds the held-out set's dataset seed and the evaluation sampler: never a training seed, and
    the same for every peer, so results compare across peers and runs."""
    seed: int = attrs.field(default=0, validator=v.instance_of(int))
    tensorboard: str = attrs.field(default="", validator=v.instance_of(str))
    """`swarmp2p train` writes TensorBoard event files here ("" = none; `--tensorboard` sets it).
    A node ignores it: its own `[node] tensorboard` gets one point per round instead of per step."""
    wandb: str = attrs.field(default="", validator=v.instance_of(str))
    """`swarmp2p train` writes an offline Weights & Biases run here ("" = none; needs the optional
    wandb package; `--wandb` sets it). A node ignores it: see `[node] wandb`."""

    # --- data ---
    tasks: tuple[str, ...] = attrs.field(default=DEFAULT_TASKS, converter=_tuple_of_str)
    weights: tuple[float, ...] = attrs.field(default=(), converter=_tuple_of_float)
    """One weight per task; empty = equal weights."""
    difficulty: int = attrs.field(default=DEFAULT_DIFFICULTY, validator=v.instance_of(int))
    """reasoning-gym curriculum level applied to every task; -1 = each dataset's default config."""
    format_reward: float = attrs.field(default=0.2, converter=float, validator=_unit_interval)
    """Weight of the answer-format reward: reward = (1 - w) * correctness + w * format. Not zero by
    default: a small model rarely answers correctly at first, and a graded format reward gives GRPO
    a signal from the first rounds. Every peer of a swarm must use the same value, since peers
    re-score each other's completions."""

    def __attrs_post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("trainer.tasks must name at least one task")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"trainer.tasks has duplicates: {self.tasks}")
        if self.weights and len(self.weights) != len(self.tasks):
            raise ValueError(f"trainer.weights has {len(self.weights)} entries for {len(self.tasks)} tasks")
        if any(w < 0 for w in self.weights) or (self.weights and sum(self.weights) <= 0):
            raise ValueError(f"trainer.weights must be >= 0 with a positive sum, got {self.weights}")

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)

    @property
    def model_cache_path(self) -> Path:
        return Path(self.model_cache).expanduser() if self.model_cache else self.data_path / "models"

    @property
    def checkpoint_dir(self) -> Path:
        return self.data_path / "checkpoints"
