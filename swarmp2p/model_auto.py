"""`--model auto`: the model a node trains, picked by the memory of the accelerator it runs on.

Like the reference system: an accelerator with at least `model_pool_large_min_gib` (40 GiB)
takes the larger pool, one with at least `model_pool_min_gib` the small pool; in a pool the
first model that is cached or downloadable now wins (in order, so a restart picks the same
model and finds its own checkpoint). No accelerator, too little memory, or no pool model
reachable (offline) falls back to the embedded tiny model, which needs neither. The pick and
its reason are one line.

`pick_model` is pure: the machine's devices (trainer.device.DeviceFacts) and the reachability
of each model are arguments, so tests inject memory figures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from trainer.device import DeviceFacts, accelerator_memory_gib, describe

SMALL_POOL: tuple[str, ...] = ("Gensyn/Qwen2.5-0.5B-Instruct", "Qwen/Qwen3-0.6B")
LARGE_POOL: tuple[str, ...] = (
    "Gensyn/Qwen2.5-1.5B-Instruct",
    "nvidia/AceInstruct-1.5B",
    "dnotitia/Smoothie-Qwen3-1.7B",
    *SMALL_POOL,
)
"""The reference's pools (Qwen2.5 / Qwen3 instruct models of 0.5-1.7B parameters); its larger
pool is for GPUs of 40 GiB or more. Both are [node] settings."""

Reachability = Callable[[str], "str | None"]
"""model -> None when it can be loaded now, else why not (one phrase)."""


@attrs.frozen
class ModelPools:
    small: tuple[str, ...] = SMALL_POOL
    large: tuple[str, ...] = LARGE_POOL
    min_gib: float = 8.0
    large_min_gib: float = 40.0

    @classmethod
    def of(cls, config: Any) -> ModelPools:
        """The pools of a NodeConfig."""
        return cls(
            config.model_pool,
            config.model_pool_large,
            config.model_pool_min_gib,
            config.model_pool_large_min_gib,
        )


@attrs.frozen
class AutoPick:
    model: str
    reason: str

    def line(self) -> str:
        return f"model auto: {self.model} ({self.reason})"


def pick_model(pools: ModelPools, device: str, facts: DeviceFacts, reachable: Reachability) -> AutoPick:
    """The model for `device` (already resolved: trainer.device.resolve_device); see the module doc."""
    where = describe(device, facts)
    memory = accelerator_memory_gib(device, facts)
    if memory is None:
        return AutoPick("tiny", f"no accelerator: {where}; the embedded tiny model")
    if memory < pools.min_gib:
        return AutoPick("tiny", f"{where}: under {pools.min_gib:g} GiB; the embedded tiny model")
    large = memory >= pools.large_min_gib
    pool = pools.large if large else pools.small
    which = (
        f"at least {pools.large_min_gib:g} GiB: the large pool"
        if large
        else f"under {pools.large_min_gib:g} GiB: the small pool"
    )
    problems: list[str] = []
    for model in pool:
        problem = reachable(model)
        if problem is None:
            return AutoPick(model, f"{where}: {which}, its first model that is cached or downloadable")
        problems.append(problem)
    last = problems[-1] if problems else "the pool is empty"
    return AutoPick(
        "tiny",
        f"{where}: {which}, but none of it is cached or downloadable ({last}); the embedded tiny model",
    )


def hub_reachability(timeout_s: float = 5.0) -> Reachability:
    """Reachability through the local Hugging Face cache and the hub, which is probed at most
    once (a pool of five models offline must not cost five connection timeouts)."""
    from swarmp2p.model_source import hub_problem, is_cached

    probed: list[str | None] = []

    def problem(model: str) -> str | None:
        if is_cached(model):
            return None
        if not probed:
            probed.append(hub_problem(timeout_s))
        return None if probed[0] is None else f"not cached and {probed[0]}"

    return problem


@attrs.frozen
class Hardware:
    """What a node runs on: its configs (with the picked model under --model auto), the device
    described for its start-up line, and the --model auto line (None without it)."""

    config: Any
    trainer_config: Any
    device: str
    auto_line: str | None


def choose_hardware(
    config: Any, trainer_config: Any, facts: DeviceFacts | None = None, reachable: Reachability | None = None
) -> Hardware:
    """Check the trainer's device against this machine (raises trainer.device.DeviceError, one
    line) and resolve --model auto. `facts`: probed from torch when not given (imports torch)."""
    from trainer.device import probe, resolve_device
    from trainer.precision import compute_label

    facts = facts if facts is not None else probe()
    device = resolve_device(trainer_config.device, facts)
    where = describe(device, facts, compute_label(trainer_config.dtype, device, facts))
    if config.model != "auto":
        return Hardware(config, trainer_config, where, None)
    pick = pick_model(ModelPools.of(config), device, facts, reachable or hub_reachability())
    if trainer_config.model == "auto":  # else a [trainer] model of its own wins, as everywhere
        trainer_config = attrs.evolve(trainer_config, model=pick.model)
    return Hardware(attrs.evolve(config, model=pick.model), trainer_config, where, pick.line())
