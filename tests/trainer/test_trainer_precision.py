"""Mixed precision (trainer/precision.py): fp32 master weights, bf16 autocast for the forward passes.

The failure this guards against: weights stored in bf16 and stepped by AdamW lose every update
smaller than half a bf16 spacing (2^-9 of the weight's magnitude), so at lr 1e-6 a model of
weights ~0.02 does not learn at all. Proven here on CPU with torch's CPU bf16 autocast (the CI
machines have no GPU); bench/gpu_check.py runs the same check on CUDA.

Tolerance of the loss under autocast against fp32 (LOSS_TOLERANCE): 1% of the loss. bf16 keeps
8 significant bits (relative rounding 2^-9, 0.2%) in each matmul; the log-probs themselves are
taken in fp32 from upcast logits (trainer/grpo.py), so the error of a mean next-token loss stays
well inside 1% (measured here: 4e-6 relative, on a random model whose logits are small; a trained
model's are larger, hence the margin).

Measured on this machine (2026-12-01): at lr 1e-6, 95,424 of 95,424 weights with a gradient moved
with fp32 master weights; 1,938 of 95,419 (2.0%) with bf16 weights, with or without autocast.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from protocol.messages import Completion, QuestionGroup, QuestionRef
from trainer.config import TrainerConfig
from trainer.device import CudaDevice, DeviceFacts
from trainer.grpo import completion_logps
from trainer.precision import Precision, PrecisionError, parse_precision, resolve_precision, small_step

GIB = 1024**3
H100 = CudaDevice("NVIDIA H100", 80 * GIB, (9, 0))
T4 = CudaDevice("Tesla T4", 15 * GIB, (7, 5))
FACTS = DeviceFacts(cuda=(H100, T4), mps=True)
TINY_LR = 1e-6
"""Far under bf16's resolution for weights of the init's scale (std 0.02): an AdamW step moves a
weight by about lr, and a bf16 weight of magnitude w only moves by at least w * 2^-9."""
LOSS_TOLERANCE = 0.01


def test_auto_is_bf16_autocast_only_on_a_gpu_with_bf16_tensor_cores() -> None:
    assert resolve_precision("auto", "cuda:0", FACTS) == Precision("cuda:0", autocast_bf16=True)
    assert not resolve_precision("auto", "cuda:1", FACTS).autocast_bf16  # Turing
    assert not resolve_precision("auto", "cpu", FACTS).autocast_bf16
    assert not resolve_precision("auto", "mps", FACTS).autocast_bf16
    assert not resolve_precision("fp32", "cuda:0", FACTS).autocast_bf16


def test_bf16_autocast_asked_for_runs_on_cpu_and_capable_gpus_only() -> None:
    assert resolve_precision("bf16-autocast", "cpu", FACTS).autocast_bf16  # the user asked
    assert resolve_precision("bf16-autocast", "cuda:0", FACTS).device_type == "cuda"
    with pytest.raises(PrecisionError, match=r"cuda:1 has no bf16 tensor cores .*use fp32"):
        resolve_precision("bf16-autocast", "cuda:1", FACTS)
    with pytest.raises(PrecisionError, match="not offered on mps"):
        resolve_precision("bf16-autocast", "mps", FACTS)
    with pytest.raises(PrecisionError, match="unknown dtype 'bf16'"):
        parse_precision("bf16")


def test_config_takes_the_dtype_choices_and_refuses_others() -> None:
    assert TrainerConfig().dtype == "auto"
    assert TrainerConfig(dtype="bf16-autocast").dtype == "bf16-autocast"
    with pytest.raises(ValueError, match="unknown dtype 'float16'"):
        TrainerConfig(dtype="float16")
    with pytest.raises(ValueError, match="write the dtype as 'fp32'"):
        TrainerConfig(dtype="FP32")


def test_the_autocast_context_computes_in_bf16_and_fp32_computes_in_fp32() -> None:
    a, b = torch.randn(4, 8), torch.randn(8, 4)
    with Precision("cpu", autocast_bf16=True).autocast():
        assert (a @ b).dtype is torch.bfloat16
    with Precision("cpu", autocast_bf16=False).autocast():
        assert (a @ b).dtype is torch.float32
    assert Precision("cuda:0", autocast_bf16=True).weights_dtype is torch.float32


def small_llama(seed: int = 0) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).float()


def token_batch() -> torch.Tensor:
    return torch.randint(0, 256, (4, 24), generator=torch.Generator().manual_seed(1))


def test_a_tiny_lr_step_moves_fp32_master_weights_under_bf16_autocast() -> None:
    model = small_llama()
    report = small_step(model, token_batch(), TINY_LR, Precision("cpu", autocast_bf16=True).autocast)
    assert all(p.dtype is torch.float32 for p in model.parameters())
    assert report.trainable > 10_000
    assert report.moved_share > 0.95, report


def test_the_same_step_on_bf16_weights_loses_the_update() -> None:
    """The failure mode the fp32 master weights fix: it really happens at this lr."""
    model = small_llama().to(torch.bfloat16)
    report = small_step(model, token_batch(), TINY_LR, Precision("cpu", autocast_bf16=True).autocast)
    assert report.trainable > 10_000
    # only weights smaller than ~lr * 2^9 (a few percent of an init of std 0.02) can move
    assert report.moved_share < 0.05, report


def test_the_loss_under_bf16_autocast_matches_fp32_within_tolerance() -> None:
    model = small_llama()
    ids = token_batch()
    mask = torch.ones_like(ids)
    with torch.no_grad():
        exact = -completion_logps(model, ids, mask, ids.size(1) - 1).mean().item()
        with Precision("cpu", autocast_bf16=True).autocast():
            mixed = -completion_logps(model, ids, mask, ids.size(1) - 1).mean().item()
    # not equal: the forward did run in bf16 (else the tolerance would be checked vacuously)
    assert mixed != exact
    assert abs(mixed - exact) <= LOSS_TOLERANCE * abs(exact), (mixed, exact)


def policy_config(data_dir: Path, dtype: str) -> TrainerConfig:
    return TrainerConfig(
        data_dir=str(data_dir),
        tasks=("basic_arithmetic",),
        tiny_hidden_size=64,
        tiny_pretrain_steps=0,
        threads=1,
        max_new_tokens=8,
        num_generations=2,
        lr=TINY_LR,
        seed=3,
        device="cpu",
        dtype=dtype,
    )


@pytest.mark.parametrize("dtype", ["bf16-autocast", "fp32"])
def test_the_policy_generates_and_trains_under_its_precision(tmp_path: Path, dtype: str) -> None:
    """TrainerPolicy wraps generation and the training forward in the precision's autocast, keeps
    fp32 weights, and a step at a tiny lr still moves them."""
    from trainer.policy import TrainerPolicy

    policy = TrainerPolicy(policy_config(tmp_path, dtype))
    autocast = dtype == "bf16-autocast"
    assert policy.precision.autocast_bf16 is autocast
    logits_dtypes: list[torch.dtype] = []
    policy.model.register_forward_hook(lambda _m, _i, out: logits_dtypes.append(out.logits.dtype))
    refs = (QuestionRef("basic_arithmetic", 3, i) for i in range(100))
    ref = next(r for r in refs if not policy.registry.is_heldout(r))
    policy.generate([ref])
    generated = set(logits_dtypes)
    logits_dtypes.clear()
    before = [p.detach().clone() for p in policy.model.parameters()]
    group = QuestionGroup(ref, (Completion("<answer>12</answer>", 1.0), Completion("no idea", 0.0)))
    assert policy.train([group])["updated"] == 1.0
    expected = {torch.bfloat16 if autocast else torch.float32}
    assert generated == expected and set(logits_dtypes) == expected
    assert all(p.dtype is torch.float32 for p in policy.model.parameters())
    pairs = zip(policy.model.parameters(), before, strict=True)
    moved = sum(int(p.detach().ne(old).sum()) for p, old in pairs)
    assert moved > 1000
