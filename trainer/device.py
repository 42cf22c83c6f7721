"""Which torch device the trainer runs on and in which dtype: parsing `--device`, checking it
against what this machine has, and the accelerator memory that `--model auto` goes by.

What the machine has is a `DeviceFacts`, read from torch by `probe()` and built by hand in tests
(the CI machines have no GPU), so every rule here runs on a CPU-only machine.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N or mps"
GIB = 1024**3
BF16_MIN_CAPABILITY = (8, 0)
"""bf16 tensor cores came with Ampere (compute capability 8.0). Older GPUs emulate bf16 slowly
or not at all; they get fp32. On CPU bf16 matmuls were measured 19x slower: never there."""


class DeviceError(ValueError):
    """The device asked for is not a device name, or this machine does not have it (one line)."""


def parse_device(text: str) -> str:
    """`text` as a normalised device name ("cuda:01" -> "cuda:1"); DeviceError otherwise."""
    name = str(text).strip().lower()
    if name in ("auto", "cpu", "cuda", "mps"):
        return name
    match = re.fullmatch(r"cuda:(\d{1,3})", name)
    if match:
        return f"cuda:{int(match.group(1))}"
    raise DeviceError(f"unknown device {text!r}: use {DEVICE_CHOICES}")


@attrs.frozen
class CudaDevice:
    name: str
    memory_bytes: int
    capability: tuple[int, int]


@attrs.frozen
class DeviceFacts:
    """What this machine has. `cuda` lists the devices this process sees (CUDA_VISIBLE_DEVICES
    applies), index = N of cuda:N; `cuda_current` is what a bare "cuda" means to torch."""

    cuda: tuple[CudaDevice, ...] = ()
    cuda_current: int = 0
    mps: bool = False
    mps_memory_bytes: int = 0
    """MPS shares system memory; torch's recommended working set when known, else 0."""


def probe() -> DeviceFacts:
    """Read the facts from torch (imports torch: about a second)."""
    import torch

    cuda: list[CudaDevice] = []
    current = 0
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            cuda.append(CudaDevice(props.name, int(props.total_memory), (props.major, props.minor)))
        current = torch.cuda.current_device()
    backend: Any = getattr(torch.backends, "mps", None)
    mps = backend is not None and backend.is_available()
    mps_memory = 0
    if mps:
        try:
            mps_memory = int(torch.mps.recommended_max_memory())
        except (AttributeError, RuntimeError):  # older torch: unknown
            mps_memory = 0
    return DeviceFacts(tuple(cuda), current, mps, mps_memory)


def resolve_device(requested: str, facts: DeviceFacts) -> str:
    """The device to run on: "auto" becomes cuda, then mps, then cpu (what exists here); an
    explicit device must exist, else DeviceError saying what this machine has."""
    device = parse_device(requested)
    if device == "auto":
        return "cuda" if facts.cuda else "mps" if facts.mps else "cpu"
    if device.startswith("cuda"):
        if not facts.cuda:
            raise DeviceError(f"device {device!r}: no CUDA device is available here")
        index = _cuda_index(device, facts)
        if index >= len(facts.cuda):
            raise DeviceError(
                f"device {device!r}: this process sees {len(facts.cuda)} CUDA device(s), "
                f"cuda:0 to cuda:{len(facts.cuda) - 1} (CUDA_VISIBLE_DEVICES renumbers them)"
            )
    if device == "mps" and not facts.mps:
        raise DeviceError("device 'mps': MPS is not available here")
    return device


def _cuda_index(device: str, facts: DeviceFacts) -> int:
    return int(device.split(":", 1)[1]) if ":" in device else facts.cuda_current


def supports_bf16(device: str, facts: DeviceFacts) -> bool:
    """bf16 only on a CUDA device with bf16 tensor cores (see BF16_MIN_CAPABILITY); never on
    CPU, and not on MPS (patchy support)."""
    if not device.startswith("cuda") or not facts.cuda:
        return False
    index = _cuda_index(device, facts)
    return index < len(facts.cuda) and facts.cuda[index].capability >= BF16_MIN_CAPABILITY


def dtype_name(device: str, facts: DeviceFacts) -> str:
    """The dtype name: "bfloat16" where the device supports it, else "float32"."""
    return "bfloat16" if supports_bf16(device, facts) else "float32"


def accelerator_memory_gib(device: str, facts: DeviceFacts) -> float | None:
    """Memory of the accelerator `device` (already resolved) runs on, in GiB; None on CPU or when
    unknown."""
    if device.startswith("cuda") and facts.cuda:
        index = _cuda_index(device, facts)
        return facts.cuda[index].memory_bytes / GIB if index < len(facts.cuda) else None
    if device == "mps" and facts.mps_memory_bytes:
        return facts.mps_memory_bytes / GIB
    return None


def describe(device: str, facts: DeviceFacts, compute: str | None = None) -> str:
    """For start-up lines: "cuda:0 (NVIDIA H100, 79.1 GiB, bf16)", "cpu (fp32)". The last word is
    what the trainer computes in: `compute` (trainer/precision.py `compute_label`, from its dtype
    setting), else what `dtype = "auto"` gives on this device."""
    dtype = compute or ("bf16" if supports_bf16(device, facts) else "fp32")
    memory = accelerator_memory_gib(device, facts)
    if device.startswith("cuda") and facts.cuda:
        index = _cuda_index(device, facts)
        return f"cuda:{index} ({facts.cuda[index].name}, {memory:.1f} GiB, {dtype})"
    if memory is not None:
        return f"{device} ({memory:.1f} GiB, {dtype})"
    return f"{device} ({dtype})"
