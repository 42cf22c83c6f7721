"""Batched sampling with a KV cache: each prompt is prefilled once, then expanded to G rows.

A hand-written loop instead of `model.generate`: on a small model on CPU the per-token Python
overhead of `generate` (logits processors, stopping criteria, cache bookkeeping) costs as much
as the forward pass itself. Prefilling every prompt once and repeating its cache G times also
saves (G - 1) prompt forwards per question.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from trainer.grpo import position_ids_for


class Cancelled(Exception):
    """Raised between steps when the caller asked the trainer to stop."""


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    repeats: int,
    max_new_tokens: int,
    temperature: float,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
    cancel: threading.Event | None = None,
    top_p: float = 1.0,
) -> list[list[int]]:
    """`repeats` sampled completions (token ids, EOS included when produced) per prompt, in
    prompt-major order. temperature 0 means greedy; top_p < 1 samples from the smallest set of
    tokens whose probability reaches top_p (nucleus sampling)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    ids, mask = ids.to(device), mask.to(device)

    cache = DynamicCache()
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=position_ids_for(mask),
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    logits = out.logits[:, -1, :]
    if repeats > 1:
        cache.batch_repeat_interleave(repeats)
        logits = logits.repeat_interleave(repeats, dim=0)
        mask = mask.repeat_interleave(repeats, dim=0)
    rows = logits.size(0)
    next_position = mask.sum(dim=1, keepdim=True)  # (rows, 1): first position after each prompt
    tokens = torch.full((rows, max_new_tokens), pad_id, dtype=torch.long, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    lengths = torch.full((rows,), max_new_tokens, dtype=torch.long, device=device)
    ones = torch.ones((rows, 1), dtype=mask.dtype, device=device)

    for step in range(max_new_tokens):
        if cancel is not None and cancel.is_set():
            raise Cancelled("generation cancelled")
        if temperature == 0.0:
            chosen = logits.argmax(dim=-1)
        else:
            probs = torch.softmax(logits.float() / temperature, dim=-1)
            if top_p < 1.0:
                probs = _nucleus(probs, top_p)
            chosen = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(device)
        chosen = torch.where(finished, torch.full_like(chosen, pad_id), chosen)
        tokens[:, step] = chosen
        just_finished = (chosen == eos_id) & ~finished
        lengths = torch.where(just_finished, torch.full_like(lengths, step + 1), lengths)
        finished |= just_finished
        if bool(finished.all()) or step == max_new_tokens - 1:
            break
        mask = torch.cat([mask, ones], dim=1)
        out = model(
            input_ids=chosen.unsqueeze(1),
            attention_mask=mask,
            position_ids=next_position + step,
            past_key_values=cache,
            use_cache=True,
        )
        logits = out.logits[:, -1, :]

    lengths_list = lengths.tolist()
    token_rows = tokens.cpu().tolist()
    return [row[:length] for row, length in zip(token_rows, lengths_list, strict=True)]


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero every token outside the smallest top-probability set whose mass reaches `top_p`
    (the most likely token always stays), then renormalise."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)
