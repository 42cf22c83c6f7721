"""Loading a causal LM (fp32 weights) and its tokenizer onto a device; the device and precision rules."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainer import device as device_rules
from trainer import precision as precision_rules
from trainer.config import TrainerConfig
from trainer.device import DeviceFacts
from trainer.precision import Precision


class ModelLoadError(Exception):
    """The configured model could not be found or loaded (one-line reason)."""


def resolve_device(requested: str, facts: DeviceFacts | None = None) -> str:
    """The device to run on (trainer/device.py; `facts`: what this machine has, probed from torch
    when not given). Raises ModelLoadError (one line) for a device this machine lacks."""
    try:
        return device_rules.resolve_device(requested, facts if facts is not None else device_rules.probe())
    except device_rules.DeviceError as error:
        raise ModelLoadError(f"trainer.device: {error}") from None


def resolve_precision(setting: str, device: str, facts: DeviceFacts | None = None) -> Precision:
    """The precision of `setting` (TrainerConfig.dtype) on `device` (trainer/precision.py; `facts`
    probed from torch when not given). Raises ModelLoadError (one line) where it cannot run."""
    try:
        return precision_rules.resolve_precision(
            setting, device, facts if facts is not None else device_rules.probe()
        )
    except precision_rules.PrecisionError as error:
        raise ModelLoadError(f"trainer.dtype: {error}") from None


def available_cores() -> int:
    """CPU cores this process may run on: its affinity set (a container's or `taskset`'s limit),
    not the machine's count, which oversubscribes a pinned process."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def configure_threads(config: TrainerConfig) -> None:
    import torch

    threads = config.threads or available_cores()
    torch.set_num_threads(threads)


def model_folder(config: TrainerConfig, progress: Any = None) -> str:
    """Where to load from: the cached tiny build, a local folder, or a hub id (resolved by transformers)."""
    if config.model == "tiny":
        from trainer.tiny import TinySpec, ensure_tiny

        return str(ensure_tiny(config.model_cache_path, TinySpec.of(config), progress))
    return config.model


def load_model_and_tokenizer(config: TrainerConfig, device: str, progress: Any = None) -> tuple[Any, Any]:
    """`progress(step, total, loss)` follows the tiny model's pre-training when it is built."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    source = model_folder(config, progress)
    looks_local = source.startswith((".", "/", "~")) or Path(source).exists()
    if looks_local and not Path(source).expanduser().exists():
        raise ModelLoadError(f"model folder {source!r} does not exist")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        # fp32 on every device: the master weights AdamW updates; bf16 compute, where chosen, is
        # autocast around the forward passes (trainer/precision.py), never the stored weights.
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    except (OSError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelLoadError(f"cannot load model {source!r}: {first_line}") from error
    if tokenizer.pad_token_id is None:
        # Many causal LMs ship without a pad token; EOS is safe because padded positions are masked.
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.eos_token_id is None:
        raise ModelLoadError(f"tokenizer of {source!r} has no EOS token")
    model.to(device)
    model.config.use_cache = True
    return model, tokenizer
