"""Batched sampling with a KV cache: each prompt is prefilled once, then expanded to G rows.

A hand-written loop instead of `model.generate`: on a small model on CPU the per-token Python
overhead of `generate` (logits processors, stopping criteria, cache bookkeeping) costs as much
as the forward pass itself. Prefilling every prompt once and repeating its cache G times also
saves (G - 1) prompt forwards per question, and rows that ended (EOS) leave the batch.
A row can also end at a stop text (`StopAtText`: the answer's closing tag), so a model that would
write on after its answer does not spend the round's time on text no reward reads.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from trainer.grpo import position_ids_for

COMPACT_WHEN_ENDED = 8
"""Drop ended rows from the batch once at least 1/COMPACT_WHEN_ENDED of it has ended (a copy of
the KV cache each time, as one decoding step's cache update already costs)."""


@functools.cache
def cache_keyword(model_class: type) -> str:
    """The keyword a model's forward takes its KV cache by: `cache` where transformers renamed it
    (5.2x: `past_key_values` still works there but warns on every call, and goes in 5.40), else
    `past_key_values` (older releases, and hub models with their own code)."""
    forward: Any = getattr(model_class, "forward", None)
    try:
        parameters = inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


class StopAtText:
    """Ends a completion at the first occurrence of `text` in its decoded text.

    Checked only on steps whose new token could complete `text` (its decoded text holds
    `text`'s last character: a vocabulary-sized mask, built on first use), and then on the
    decoded tail of that row alone, so a step costs one tensor lookup, not a decode per row.
    A row that stops gets EOS after it (when the length limit leaves room): the completion
    ended, as the model's own EOS would have said, and as `TrainerPolicy.completion_ids`
    re-tokenizes a peer's completion that ended before the limit."""

    def __init__(self, text: str, decode: Callable[[list[int]], str], vocab_size: int) -> None:
        if not text:
            raise ValueError("the stop text is empty")
        self.text = text
        self.decode = decode
        self.vocab_size = vocab_size
        # Tokens decode to at least one character (a special one to none: skipped, so they
        # cannot complete the text), so `text` lies within the last len(text) tokens; twice
        # that leaves room for byte-level pieces of one character.
        self.window = 2 * len(text)
        self._may_end: torch.Tensor | None = None

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, text: str) -> StopAtText:
        """Decoded as the policy decodes completions (special tokens skipped)."""
        return cls(text, lambda ids: tokenizer.decode(ids, skip_special_tokens=True), len(tokenizer))

    def may_end(self, device: torch.device, logits_size: int) -> torch.Tensor:
        """(logits_size,) bool: the tokens whose text holds the stop text's last character.
        A model's output layer may be wider than its tokenizer (Qwen2's is padded): those
        ids decode to nothing and are never marked."""
        if self._may_end is None or self._may_end.device != device or self._may_end.numel() != logits_size:
            last = self.text[-1]
            marks = [last in self.decode([token]) for token in range(min(self.vocab_size, logits_size))]
            marks += [False] * (logits_size - len(marks))
            self._may_end = torch.tensor(marks, dtype=torch.bool, device=device)
        return self._may_end

    def found(self, tail: list[int]) -> bool:
        """Does the decoded `tail` (a row's last `window` tokens) hold the stop text?"""
        return self.text in self.decode(tail)


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
    stop: StopAtText | None = None,
    logprobs: list[list[float]] | None = None,
) -> list[list[int]]:
    """`repeats` sampled completions (token ids, EOS included when produced) per prompt, in
    prompt-major order. temperature 0 means greedy; top_p < 1 samples from the smallest set of
    tokens whose probability reaches top_p (nucleus sampling). `stop`: a row also ends at the
    first token that completes the stop text, followed by EOS when shorter than the limit.

    `logprobs`: when a list is given, it receives one list per completion (same order) with the
    log-probability of each SAMPLED token under the distribution that sampled it: logits /
    temperature, renormalised to the nucleus when top_p < 1, and 0.0 when greedy (a point mass).
    An EOS appended after the stop text was not sampled and has no entry, so such a list is one
    shorter than its ids. With top_p == 1 the value is computed as `completion_logps` computes
    the trainer's (logit - logsumexp in fp32), so the same logits give the same number."""
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
    cache_arg = cache_keyword(type(model))
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=position_ids_for(mask),
        **{cache_arg: cache},
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
    picked = None  # (rows, max_new_tokens) sampling log-probs, only when the caller wants them
    if logprobs is not None:
        picked = torch.zeros((rows, max_new_tokens), dtype=torch.float32, device=device)
    lengths = torch.full((rows,), max_new_tokens, dtype=torch.long, device=device)
    # The batch shrinks as completions end: `live[i]` is the output row of batch row i, and a
    # row that produced EOS is dropped from the batch (and its KV cache) once enough have
    # ended, so the tail of a round's generation does not pay for finished rows.
    live = torch.arange(rows, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    stopped: list[int] = []  # output rows that ended at the stop text (EOS appended at the end)
    may_end = stop.may_end(device, logits.size(-1)) if stop is not None else None

    for step in range(max_new_tokens):
        if cancel is not None and cancel.is_set():
            raise Cancelled("generation cancelled")
        if temperature == 0.0:
            chosen = logits.argmax(dim=-1)
            if picked is not None:
                picked[live, step] = 0.0
        else:
            scaled = logits.float() / temperature
            probs = torch.softmax(scaled, dim=-1)
            if top_p < 1.0:
                probs = _nucleus(probs, top_p)
            chosen = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(device)
            if picked is not None:
                picked[live, step] = _sampled_logps(scaled, probs, chosen, top_p)
        chosen = torch.where(finished, torch.full_like(chosen, pad_id), chosen)
        tokens[live, step] = chosen
        just_finished = (chosen == eos_id) & ~finished
        if bool(just_finished.any()):
            lengths[live[just_finished]] = step + 1
            finished |= just_finished
        if stop is not None and may_end is not None:
            candidates = may_end[chosen] & ~finished
            if bool(candidates.any()):
                for index in candidates.nonzero().squeeze(1).tolist():
                    row = int(live[index])
                    if stop.found(tokens[row, max(0, step + 1 - stop.window) : step + 1].tolist()):
                        lengths[row] = step + 1
                        finished[index] = True
                        stopped.append(row)
        if step == max_new_tokens - 1:
            break
        ended = int(finished.sum())
        if ended == finished.numel():
            break
        if ended * COMPACT_WHEN_ENDED >= finished.numel():
            keep = (~finished).nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            live, mask, next_position, chosen = live[keep], mask[keep], next_position[keep], chosen[keep]
            finished = finished[keep]
        mask = torch.cat([mask, mask.new_ones((mask.size(0), 1))], dim=1)
        out = model(
            input_ids=chosen.unsqueeze(1),
            attention_mask=mask,
            position_ids=next_position + step,
            **{cache_arg: cache},
            use_cache=True,
        )
        logits = out.logits[:, -1, :]

    lengths_list = lengths.tolist()
    token_rows = tokens.cpu().tolist()
    completions = [row[:length] for row, length in zip(token_rows, lengths_list, strict=True)]
    if logprobs is not None and picked is not None:
        picked_rows = picked.cpu().tolist()
        logprobs.extend(row[:length] for row, length in zip(picked_rows, lengths_list, strict=True))
    for row in stopped:
        if len(completions[row]) < max_new_tokens:
            completions[row].append(eos_id)
    return completions


def _sampled_logps(
    scaled: torch.Tensor, probs: torch.Tensor, chosen: torch.Tensor, top_p: float
) -> torch.Tensor:
    """(rows,) log-probability of each chosen token under the distribution it was drawn from.
    Full distribution: logit - logsumexp, exactly `completion_logps`'s formula. Nucleus: the log
    of the renormalised probability (the sampler's real distribution; never 0 for a drawn token).
    Clamped at 0: a renormalised probability may round a hair above 1."""
    index = chosen.unsqueeze(1)
    if top_p < 1.0:
        values = torch.log(probs.gather(1, index).squeeze(1))
    else:
        values = scaled.gather(1, index).squeeze(1) - torch.logsumexp(scaled, dim=-1)
    return values.clamp(max=0.0)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero every token outside the smallest top-probability set whose mass reaches `top_p`
    (the most likely token always stays), then renormalise."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)
