"""bench/gpu_check.py, the GPU machine's one prepared script, keeps working on CPU (`--small`): its
model round-trips text, its comparison and drift parts produce figures, and the wheelhouse it
installs from asks for what it needs and never for torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import gpu_check  # noqa: E402
import gpu_wheels  # noqa: E402


def test_the_built_model_decodes_every_id_to_a_word_that_tokenizes_back(tmp_path: Path) -> None:
    """Both trainers re-tokenize sampled text (TRL always, ours for text it did not sample): the
    random model's ids must survive the round trip, or the two would train on different tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    size = gpu_check.build_model(tmp_path, gpu_check.SMALL, "cpu")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert size == sum(p.numel() for p in model.parameters())
    assert len(tokenizer) == model.config.vocab_size == gpu_check.SMALL["vocab_size"]
    ids = [3, 17, 2047, 999, 1]  # any words, then EOS
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == ids[:-1]
    assert tokenizer.eos_token_id == 1 and tokenizer.pad_token_id == 0


def test_the_wheelhouse_asks_for_trl_and_reasoning_gym_and_never_for_torch() -> None:
    reqs = gpu_wheels.requirements()
    names = {gpu_wheels.canonical(r.split(">")[0].split("=")[0].split("[")[0]) for r in reqs}
    assert {"trl", "reasoning-gym", "libp2p", "transformers"} <= names
    assert not any(gpu_wheels.TORCH_STACK.match(name) for name in names)
    assert gpu_wheels.TORCH_STACK.match("nvidia-cublas") and not gpu_wheels.TORCH_STACK.match("torchvision-x")


@pytest.mark.slow
def test_the_comparison_and_drift_parts_run_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [
            *(sys.executable, str(BENCH / "gpu_check.py"), "--device", "cpu", "--small", "--threads", "1"),
            *("--parts", "grpo,drift", "--work", str(tmp_path / "work"), "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {row["what"].split(" (")[0]: row for row in json.loads(out.read_text())["rows"]}
    generation = rows["generation tokens/s"]
    assert float(generation["ours"]) > 0 and float(generation["reference"]) > 0
    step = rows["GRPO step s, median of 2"]
    assert float(step["ours"]) > 0 and float(step["reference"]) > 0  # TRL's GRPOTrainer ran too
    moved = rows["bf16 drift: weights one AdamW step at lr 1e-06 moved"]
    assert moved["verdict"] == "ok" and moved["ours"].startswith("100.0%"), moved
    loss = rows["bf16 drift: next-token loss under bf16 autocast vs fp32"]
    assert loss["verdict"] == "ok" and 0 < float(loss["ratio"]) <= 0.01, loss
