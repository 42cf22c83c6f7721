"""Our GRPO loss and gradients match TRL's GRPOTrainer on the same batch.

TRL is driven through its own `compute_loss` (a real GRPOTrainer around the same tiny model),
not re-implemented here. Old log-probs are perturbed away from the current ones so that the
clip (0.2 low / 0.28 high) is actually exercised, and beta > 0 exercises the KL term.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from trainer.config import TrainerConfig
from trainer.grpo import completion_logps, grpo_loss, pack
from trainer.model import load_model_and_tokenizer

TEMPERATURE = 0.9


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrainerConfig, Path]:
    config = TrainerConfig(
        data_dir=str(tmp_path_factory.mktemp("parity")),
        tasks=("basic_arithmetic",),
        tiny_hidden_size=64,
        tiny_pretrain_steps=0,
        threads=1,
    )
    return config


def _batch(pad_id: int, vocab: int) -> tuple:
    gen = torch.Generator().manual_seed(0)
    prompt_len, rows = 12, 6
    prompts = [torch.randint(3, vocab, (prompt_len,), generator=gen).tolist() for _ in range(rows)]
    lengths = [7, 3, 9, 9, 1, 5]
    completions = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in lengths]
    batch = pack(prompts, completions, pad_id)
    advantages = torch.tensor([1.2, -0.7, 0.3, -1.1, 0.9, -0.4])
    return batch, advantages


@pytest.mark.parametrize(
    ("loss_type", "aggregation", "beta"),
    [("dapo", "token", 0.0), ("dapo", "token", 0.04), ("grpo", "sequence", 0.04)],
)
def test_loss_and_gradients_match_trl(
    tiny_folder: TrainerConfig, loss_type: str, aggregation: str, beta: float, tmp_path: Path
) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer(tiny_folder, "cpu")
    ours = copy.deepcopy(model)  # copied before TRL patches the instance's forward
    batch, advantages = _batch(tokenizer.pad_token_id, len(tokenizer))
    mask = batch.completion_mask
    width = batch.completion_ids.size(1)

    with torch.no_grad():
        current = completion_logps(ours, batch.input_ids, batch.attention_mask, width, TEMPERATURE)
        noise = torch.Generator().manual_seed(1)
        old_logps = current + 0.4 * torch.randn(current.shape, generator=noise)
        ref_logps = current + 0.3 * torch.randn(current.shape, generator=noise)

    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=6,
        num_generations=3,
        max_completion_length=width,
        temperature=TEMPERATURE,
        beta=beta,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type=loss_type,
        bf16=False,
        use_cpu=True,
        report_to=[],
        logging_steps=1000,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["a", "b", "c"]}),
        processing_class=tokenizer,
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    inputs = {
        "prompt_ids": batch.prompt_ids,
        "prompt_mask": batch.prompt_mask,
        "completion_ids": batch.completion_ids,
        "completion_mask": batch.completion_mask,
        "advantages": advantages,
        "old_per_token_logps": old_logps,
        "ref_per_token_logps": ref_logps,
        "num_items_in_batch": mask.sum(),
    }
    trl_loss = trainer.compute_loss(trainer.model, inputs)
    trl_loss.backward()

    ours.train()
    logps = completion_logps(ours, batch.input_ids, batch.attention_mask, width, TEMPERATURE)
    parts = grpo_loss(logps, old_logps, advantages, mask, 0.2, 0.28, beta, ref_logps, aggregation)
    parts.loss.backward()

    assert parts.clip_fraction > 0.0, "the batch must exercise the clip for this test to mean anything"
    torch.testing.assert_close(parts.loss.detach(), trl_loss.detach(), rtol=1e-5, atol=1e-6)
    trl_params = dict(trainer.model.named_parameters())
    compared = 0
    for name, param in ours.named_parameters():
        other = trl_params[name]
        assert param.grad is not None and other.grad is not None, name
        torch.testing.assert_close(
            param.grad, other.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}"
        )
        compared += 1
    assert compared > 5
