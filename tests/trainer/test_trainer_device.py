"""Device names (`--device cpu|cuda|cuda:N|mps|auto`), their check against what the machine has,
and the dtype: bf16 only on a CUDA device with bf16 tensor cores, never on CPU. The machine's
devices are injected as DeviceFacts (no GPU here)."""

from __future__ import annotations

import pytest

from trainer.config import TrainerConfig
from trainer.device import (
    CudaDevice,
    DeviceError,
    DeviceFacts,
    accelerator_memory_gib,
    describe,
    dtype_name,
    parse_device,
    probe,
    resolve_device,
)

GIB = 1024**3
H100 = CudaDevice("NVIDIA H100 80GB HBM3", 80 * GIB, (9, 0))
T4 = CudaDevice("Tesla T4", 15 * GIB, (7, 5))
TWO_GPUS = DeviceFacts(cuda=(H100, T4))
CPU_ONLY = DeviceFacts()


@pytest.mark.parametrize(
    ("text", "name"),
    [("cpu", "cpu"), ("CUDA", "cuda"), (" cuda:1 ", "cuda:1"), ("cuda:01", "cuda:1"), ("mps", "mps")],
)
def test_device_names(text: str, name: str) -> None:
    assert parse_device(text) == name


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2", "", "tpu"])
def test_bad_device_names_are_one_line_errors(text: str) -> None:
    with pytest.raises(DeviceError) as error:
        parse_device(text)
    assert "cpu, cuda, cuda:N or mps" in str(error.value) and "\n" not in str(error.value)


def test_auto_picks_cuda_then_mps_then_cpu() -> None:
    assert resolve_device("auto", TWO_GPUS) == "cuda"
    assert resolve_device("auto", DeviceFacts(mps=True)) == "mps"
    assert resolve_device("auto", CPU_ONLY) == "cpu"


def test_an_explicit_device_must_exist() -> None:
    assert resolve_device("cuda:1", TWO_GPUS) == "cuda:1"
    with pytest.raises(DeviceError, match=r"sees 2 CUDA device\(s\), cuda:0 to cuda:1"):
        resolve_device("cuda:2", TWO_GPUS)
    with pytest.raises(DeviceError, match="no CUDA device"):
        resolve_device("cuda:0", CPU_ONLY)
    with pytest.raises(DeviceError, match="MPS is not available"):
        resolve_device("mps", CPU_ONLY)
    assert resolve_device("cpu", CPU_ONLY) == "cpu"


def test_bf16_only_on_cuda_devices_that_support_it() -> None:
    assert dtype_name("cuda:0", TWO_GPUS) == "bfloat16"  # Hopper
    assert dtype_name("cuda:1", TWO_GPUS) == "float32"  # Turing: no bf16 tensor cores
    assert dtype_name("cuda", DeviceFacts(cuda=(T4, H100), cuda_current=1)) == "bfloat16"
    assert dtype_name("cpu", TWO_GPUS) == "float32"  # never on CPU, even on a GPU machine
    assert dtype_name("mps", DeviceFacts(mps=True)) == "float32"


def test_weights_are_fp32_everywhere_and_bf16_is_autocast_where_supported() -> None:
    import torch

    from trainer.model import resolve_precision

    for device in ("cpu", "cuda:0", "cuda:1"):
        assert resolve_precision("auto", device, TWO_GPUS).weights_dtype is torch.float32
    assert resolve_precision("auto", "cuda:0", TWO_GPUS).autocast_bf16  # Hopper
    assert not resolve_precision("auto", "cuda:1", TWO_GPUS).autocast_bf16  # Turing
    assert not resolve_precision("auto", "cpu", TWO_GPUS).autocast_bf16
    assert not resolve_precision("auto", "cpu").autocast_bf16  # probed: this machine


def test_accelerator_memory_and_description() -> None:
    assert accelerator_memory_gib("cuda:1", TWO_GPUS) == pytest.approx(15.0)
    assert accelerator_memory_gib("cuda", TWO_GPUS) == pytest.approx(80.0)
    assert accelerator_memory_gib("cpu", TWO_GPUS) is None
    assert accelerator_memory_gib("mps", DeviceFacts(mps=True, mps_memory_bytes=24 * GIB)) == 24.0
    assert describe("cuda:0", TWO_GPUS) == "cuda:0 (NVIDIA H100 80GB HBM3, 80.0 GiB, bf16)"
    assert describe("cpu", CPU_ONLY) == "cpu (fp32)"
    # the precision the trainer is configured with, not only what the device could do
    from trainer.precision import compute_label

    def line(device: str, facts: DeviceFacts, setting: str) -> str:
        return describe(device, facts, compute_label(setting, device, facts))

    assert line("cuda:0", TWO_GPUS, "fp32") == "cuda:0 (NVIDIA H100 80GB HBM3, 80.0 GiB, fp32)"
    assert line("cuda:0", TWO_GPUS, "auto") == describe("cuda:0", TWO_GPUS)
    assert line("cpu", CPU_ONLY, "bf16-autocast") == "cpu (bf16)"
    assert line("cuda:1", TWO_GPUS, "bf16-autocast").endswith("15.0 GiB, bf16-autocast unavailable)")


def test_probe_on_this_machine_matches_torch() -> None:
    import torch

    facts = probe()
    assert len(facts.cuda) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)


def test_trainer_config_takes_cuda_n_and_refuses_nonsense() -> None:
    assert TrainerConfig(device="cuda:3").device == "cuda:3"
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        TrainerConfig(device="gpu")


def test_the_trainer_says_which_device_is_missing() -> None:
    from trainer.model import ModelLoadError
    from trainer.model import resolve_device as trainer_resolve

    with pytest.raises(ModelLoadError, match=r"^trainer.device: device 'cuda:0': no CUDA device"):
        trainer_resolve("cuda:0", CPU_ONLY)
