"""`--model auto` picks from the model pools by the accelerator's memory (injected here as
DeviceFacts: no GPU on this machine), falls back to the tiny model without an accelerator or
offline, and says what it picked and why in one line; `--device` is checked before a node
starts anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from swarmp2p.model_auto import LARGE_POOL, SMALL_POOL, ModelPools, choose_hardware, pick_model
from swarmp2p.node_config import NodeConfig
from trainer.config import TrainerConfig
from trainer.device import CudaDevice, DeviceError, DeviceFacts

GIB = 1024**3


def gpu(gib: float, capability: tuple[int, int] = (8, 0)) -> DeviceFacts:
    return DeviceFacts(cuda=(CudaDevice("GPU", int(gib * GIB), capability),))


def online(model: str) -> str | None:
    return None


def offline(model: str) -> str | None:
    return "not cached and offline mode is on"


@pytest.mark.parametrize(
    ("gib", "expected"),
    [(80, LARGE_POOL[0]), (40, LARGE_POOL[0]), (39.9, SMALL_POOL[0]), (8, SMALL_POOL[0]), (7.9, "tiny")],
)
def test_the_pool_follows_the_accelerator_memory(gib: float, expected: str) -> None:
    pick = pick_model(ModelPools(), "cuda", gpu(gib), online)
    assert pick.model == expected
    assert "\n" not in pick.line() and pick.line().startswith(f"model auto: {expected} (")


def test_the_line_says_why() -> None:
    assert "at least 40 GiB: the large pool" in pick_model(ModelPools(), "cuda", gpu(80), online).line()
    assert "under 40 GiB: the small pool" in pick_model(ModelPools(), "cuda", gpu(24), online).line()
    assert "under 8 GiB" in pick_model(ModelPools(), "cuda", gpu(4), online).line()


def test_no_accelerator_means_the_tiny_model() -> None:
    pick = pick_model(ModelPools(), "cpu", gpu(80), online)  # a GPU machine told --device cpu
    assert pick.model == "tiny" and "no accelerator: cpu (fp32)" in pick.reason


def test_offline_falls_back_to_the_tiny_model_and_says_why() -> None:
    pick = pick_model(ModelPools(), "cuda", gpu(80), offline)
    assert pick.model == "tiny"
    assert "none of it is cached or downloadable (not cached and offline mode is on)" in pick.reason


def test_the_first_reachable_model_of_the_pool_wins() -> None:
    cached = {LARGE_POOL[2]}
    pick = pick_model(ModelPools(), "cuda", gpu(80), lambda m: None if m in cached else "not cached")
    assert pick.model == LARGE_POOL[2]


def test_pools_and_thresholds_come_from_the_node_config() -> None:
    config = NodeConfig(model_pool=("me/small",), model_pool_large=("me/large",), model_pool_large_min_gib=20)
    assert pick_model(ModelPools.of(config), "cuda", gpu(24), online).model == "me/large"
    assert pick_model(ModelPools.of(config), "cuda", gpu(16), online).model == "me/small"


def test_the_device_chosen_is_the_one_measured() -> None:
    facts = DeviceFacts(cuda=(CudaDevice("big", 80 * GIB, (9, 0)), CudaDevice("small", 16 * GIB, (8, 6))))
    assert pick_model(ModelPools(), "cuda:1", facts, online).model == SMALL_POOL[0]
    assert pick_model(ModelPools(), "cuda:0", facts, online).model == LARGE_POOL[0]


def test_choose_hardware_sets_both_configs() -> None:
    config = NodeConfig(model="auto")
    trainer = TrainerConfig(model="auto", device="cuda:0")
    chosen = choose_hardware(config, trainer, gpu(80), online)
    assert chosen.config.model == chosen.trainer_config.model == LARGE_POOL[0]
    assert chosen.auto_line is not None and chosen.device == "cuda:0 (GPU, 80.0 GiB, bf16)"
    fp32 = choose_hardware(config, attrs.evolve(trainer, dtype="fp32"), gpu(80), online)
    assert fp32.device == "cuda:0 (GPU, 80.0 GiB, fp32)"  # says what the trainer will compute in
    plain = choose_hardware(NodeConfig(), TrainerConfig(), DeviceFacts(), online)
    assert plain.auto_line is None and plain.config.model == "tiny" and plain.device == "cpu (fp32)"
    own = choose_hardware(config, attrs.evolve(trainer, model="my/own"), gpu(80), online)
    assert own.trainer_config.model == "my/own"  # a [trainer] model of its own is kept


def test_choose_hardware_refuses_a_missing_device() -> None:
    with pytest.raises(DeviceError, match="no CUDA device"):
        choose_hardware(NodeConfig(), TrainerConfig(device="cuda:1"), DeviceFacts(), online)


def _node(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", "node", "--data-dir", str(tmp_path / "data"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_node_device_flag_errors_are_one_line(tmp_path: Path) -> None:
    bad = _node(tmp_path, "--device", "gpu")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert [line for line in bad.stderr.splitlines() if line.strip()] == [
        line for line in bad.stderr.splitlines() if "unknown device 'gpu'" in line
    ], bad.stderr
    missing = _node(tmp_path, "--device", "cuda:99")  # no machine here has 100 GPUs
    errors = [line for line in missing.stderr.splitlines() if line.strip()]
    assert missing.returncode == 1 and len(errors) == 1, missing.stderr
    assert "--device: device 'cuda:99': " in errors[0]
    assert not (tmp_path / "data").exists(), "checked before anything started"


def test_a_node_with_model_auto_and_no_accelerator_runs_the_tiny_model(tmp_path: Path) -> None:
    import signal

    import torch

    from tests.helpers.nodes import NodeProcess

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: auto picks from a pool there")
    config = tmp_path / "fast.toml"
    config.write_text(
        '[node]\nquestions_per_round = 2\n\n[trainer]\ntasks = ["basic_arithmetic"]\nthreads = 1\n'
        "max_new_tokens = 16\ntiny_hidden_size = 32\ntiny_pretrain_steps = 0\n"
    )
    node = NodeProcess(tmp_path / "node", config, Path("auto"), [])
    try:
        node.start()
        node.info()
        output = node.output()
        assert "model auto: tiny (no accelerator: cpu (fp32); the embedded tiny model)" in output, output
        assert "loading the model (tiny) on cpu (fp32)" in output, output
        assert node.stop(signal.SIGTERM) == 0, node.output()
    finally:
        node.stop(signal.SIGKILL, timeout_s=5)


def test_train_with_model_auto_and_no_accelerator_trains_the_tiny_model(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: auto picks from a pool there")
    config = tmp_path / "train.toml"
    config.write_text(
        '[trainer]\ntasks = ["basic_arithmetic"]\nmax_new_tokens = 8\ntiny_hidden_size = 32\n'
        "tiny_pretrain_steps = 0\nnum_generations = 2\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", "train", "--model", "auto", "--config", str(config),
         "--steps", "1", "--questions", "1", "--threads", "1", "--eval-every", "0",
         "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "model auto: tiny (no accelerator: cpu (fp32); the embedded tiny model)" in output
    assert "model 'tiny'" in output
    bad = subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", "train", "--model", "auto", "--device", "cuda:99",
         "--data-dir", str(tmp_path / "data2"), "--out", str(tmp_path / "out2")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    errors = [line for line in bad.stderr.splitlines() if line.strip()]
    assert bad.returncode == 2 and len(errors) == 1 and "--device: device 'cuda:99'" in errors[0], bad.stderr
