"""`swarmp2p node --threads N` sets torch's threads AND OpenMP's and MKL's (their pools read
OMP_NUM_THREADS / MKL_NUM_THREADS once, when torch loads): node.json reports what the running
node computes with."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from swarmp2p.cli_node import apply_thread_limits
from tests.helpers.nodes import NodeProcess


def test_apply_thread_limits_sets_both_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    apply_thread_limits(0)  # 0: all cores, the environment is left alone
    assert os.environ["OMP_NUM_THREADS"] == "7" and "MKL_NUM_THREADS" not in os.environ
    apply_thread_limits(3)
    assert (os.environ["OMP_NUM_THREADS"], os.environ["MKL_NUM_THREADS"]) == ("3", "3")


@pytest.mark.slow
def test_node_threads_flag_reaches_torch_omp_and_mkl(tmp_path: Path) -> None:
    config = tmp_path / "fast.toml"
    config.write_text(
        '[node]\nquestions_per_round = 2\n\n[trainer]\ntasks = ["basic_arithmetic"]\nthreads = 1\n'
        "max_new_tokens = 16\ntiny_hidden_size = 32\ntiny_pretrain_steps = 0\n"
    )
    # The harness exports OMP_NUM_THREADS=1 and the config says 1: the flag must win over both.
    node = NodeProcess(tmp_path / "node", config, Path("tiny"), ["--threads", "2"])
    try:
        node.start()
        assert node.info()["threads"] == {"torch": 2, "omp": "2", "mkl": "2"}, node.output()
        assert node.stop(signal.SIGTERM) == 0, node.output()
    finally:
        node.stop(signal.SIGKILL, timeout_s=5)


def test_bf16_only_on_cuda_never_on_cpu() -> None:
    """bf16 matmuls on CPU were measured 19x slower: the trainer computes in fp32 there (and on
    MPS); on an Ampere GPU it computes under bf16 autocast (its weights stay fp32 everywhere)."""
    from trainer.device import CudaDevice, DeviceFacts
    from trainer.model import resolve_precision

    ampere = DeviceFacts(cuda=(CudaDevice("A100", 40 * 1024**3, (8, 0)),), mps=True)
    assert not resolve_precision("auto", "cpu", ampere).autocast_bf16
    assert not resolve_precision("auto", "mps", ampere).autocast_bf16
    assert resolve_precision("auto", "cuda", ampere).autocast_bf16
    assert not resolve_precision("auto", "cpu").autocast_bf16  # this machine, probed
