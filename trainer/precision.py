"""Numeric precision of the trainer: fp32 master weights, optionally computing in bf16 under autocast.

Weights (and so AdamW's state and every update) are always fp32. Loading them in bf16 instead
halves their memory but loses small updates: a bf16 number has 8 significant bits, so an AdamW
step of lr 1e-6 on a weight of magnitude 2.6e-4 or more is under half its spacing and rounds
back to the weight itself (tests/trainer/test_trainer_precision.py shows both sides). What bf16 buys on
a GPU with bf16 tensor cores, the speed and the smaller activations, comes from autocast: inside
`Precision.autocast()` matmuls run in bf16 on bf16 copies of the weights, while reductions that
need range (softmax, norms, the log-probs of trainer/grpo.py, which upcast the logits) stay fp32.

The setting (`TrainerConfig.dtype`, `--dtype`):
- "auto": bf16 autocast on a CUDA device with bf16 tensor cores (trainer/device.py), else fp32;
  never on CPU, where bf16 was measured many times slower.
- "fp32": fp32 everywhere.
- "bf16-autocast": asked for explicitly; refused on a GPU without bf16 tensor cores and on MPS,
  allowed on CPU (torch's CPU autocast: for checking the numerics, not for speed).

`resolve_precision` is pure: the machine's devices are a `DeviceFacts` argument, so the CUDA rules
are tested on a CPU-only machine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import attrs

from trainer.device import BF16_MIN_CAPABILITY, DeviceFacts, supports_bf16

PRECISION_CHOICES: tuple[str, ...] = ("auto", "fp32", "bf16-autocast")


class PrecisionError(ValueError):
    """The precision asked for cannot run on this device (one line)."""


@attrs.frozen
class Precision:
    """How the trainer computes on one (resolved) device. `autocast_bf16`: forward passes (the
    training step's and generation's) run under torch.autocast(bfloat16); weights stay fp32."""

    device: str
    autocast_bf16: bool

    @property
    def device_type(self) -> str:
        """torch.autocast's device type: "cuda" for "cuda:1"."""
        return self.device.split(":", 1)[0]

    @property
    def weights_dtype(self) -> Any:
        """Always fp32: the master weights that AdamW updates (see the module doc)."""
        import torch

        return torch.float32

    @property
    def label(self) -> str:
        """For start-up lines: "bf16 autocast, fp32 weights" or "fp32"."""
        return "bf16 autocast, fp32 weights" if self.autocast_bf16 else "fp32"

    def autocast(self) -> AbstractContextManager[Any]:
        """A fresh context for one forward pass (or one generation): bf16 autocast, or nothing.
        The backward pass belongs outside it (torch's advice: it runs in the dtypes the forward
        chose either way)."""
        if not self.autocast_bf16:
            return contextlib.nullcontext()
        import torch

        return torch.autocast(device_type=self.device_type, dtype=torch.bfloat16)


def parse_precision(text: str) -> str:
    """`text` as one of PRECISION_CHOICES; PrecisionError otherwise."""
    name = str(text).strip().lower()
    if name not in PRECISION_CHOICES:
        raise PrecisionError(f"unknown dtype {text!r}: use {', '.join(PRECISION_CHOICES)}")
    return name


def resolve_precision(setting: str, device: str, facts: DeviceFacts) -> Precision:
    """The precision for `setting` on `device` (already resolved: trainer.device.resolve_device);
    PrecisionError (one line) for bf16 autocast where the device cannot run it well."""
    name = parse_precision(setting)
    if name == "fp32":
        return Precision(device, autocast_bf16=False)
    bf16_here = supports_bf16(device, facts)
    if name == "auto":
        return Precision(device, autocast_bf16=bf16_here)
    if device.startswith("cuda") and not bf16_here:
        major, minor = BF16_MIN_CAPABILITY
        raise PrecisionError(
            f"dtype 'bf16-autocast': {device} has no bf16 tensor cores (compute capability under "
            f"{major}.{minor}); use fp32"
        )
    if device == "mps":
        raise PrecisionError("dtype 'bf16-autocast' is not offered on mps (patchy bf16 support); use fp32")
    return Precision(device, autocast_bf16=True)


def compute_label(setting: str, device: str, facts: DeviceFacts) -> str:
    """What start-up lines say the trainer computes in (trainer.device.describe): "bf16" (autocast,
    fp32 weights), "fp32", or that the setting cannot run here (the trainer refuses it in one line
    when it starts; a description is not the place to fail)."""
    try:
        return "bf16" if resolve_precision(setting, device, facts).autocast_bf16 else "fp32"
    except PrecisionError:
        return f"{setting} unavailable"


AutocastFactory = Callable[[], AbstractContextManager[Any]]


@attrs.frozen
class SmallStepReport:
    """What one small AdamW step did to a model's weights (`small_step`)."""

    loss: float
    moved: int
    """Weight elements whose value changed."""
    trainable: int
    """Weight elements that had a nonzero gradient (those an update could move)."""

    @property
    def moved_share(self) -> float:
        return self.moved / self.trainable if self.trainable else 0.0


def small_step(model: Any, input_ids: Any, lr: float, autocast: AutocastFactory) -> SmallStepReport:
    """One AdamW step of `lr` on the mean next-token negative log-likelihood of `input_ids`, the
    forward pass under `autocast()`; reports the loss before the step and how many weights moved.

    The bf16 drift check: with fp32 weights nearly every weight with a gradient moves even at a
    learning rate far below bf16's resolution; with weights stored in bf16 almost none do. Used
    by tests/trainer/test_trainer_precision.py on CPU and bench/gpu_check.py on CUDA. Steps `model`
    in place."""
    import torch

    from trainer.grpo import completion_logps

    mask = torch.ones_like(input_ids)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    with autocast():
        logps = completion_logps(model, input_ids, mask, input_ids.size(1) - 1)
    loss = -logps.mean()
    loss.backward()
    # A weight without gradient (an embedding row no token used) cannot move at any precision.
    had_grad = [p.grad is not None and p.grad.ne(0) for p in model.parameters()]
    optimizer.step()
    moved = trainable = 0
    for old, new, grad in zip(before, model.parameters(), had_grad, strict=True):
        if grad is False:
            continue
        trainable += int(grad.sum())
        moved += int((new.detach().ne(old) & grad).sum())
    optimizer.zero_grad(set_to_none=True)
    return SmallStepReport(float(loss.detach()), moved, trainable)
