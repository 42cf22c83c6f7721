"""The GRPO objective as pure tensor functions: advantages, per-token log-probs, clipped loss.

Read top to bottom, this is one GRPO step:
  1. group-normalised advantages: A_i = (r_i - mean(r)) / (std(r) + 1e-4) within a question's group;
  2. per-token log-probs of each completion under the policy (and the frozen reference if beta > 0);
  3. ratio = exp(logp - logp_old); surrogate = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A);
  3b. when the completions were sampled by another policy (a peer's model, or ours before an
      update), the surrogate is multiplied per token by the truncated importance weight
      w = min(exp(logp_old - logp_behaviour), cap), detached (`behaviour_weights`);
  4. plus beta * ratio * KL(policy || reference) per token (k3 estimator, ratio-corrected);
  5. token-level mean over every completion token of the batch (or per-sequence mean, then batch mean).
The formulas follow TRL's GRPOTrainer so that the loss can be checked against it (tests do).

Step 3b is truncated importance sampling (TIS) as Yao et al. 2025, "Your Efficient RL Framework
Secretly Brings You Off-Policy RL Training", apply it to the mismatch between a fast sampler and
the trainer, and as TRL's GRPOTrainer does for vLLM samples (`vllm_importance_sampling_correction`
with `vllm_importance_sampling_mode="token_truncate"`: the per-token ratio
exp(old_per_token_logps - sampling_per_token_logps) clamped at `vllm_importance_sampling_clip_max`,
formerly `vllm_importance_sampling_cap`, default 2.0 in the releases that introduced it, then
multiplied into the per-token loss before the KL term is added). Here the behaviour policy is
whoever sampled the text: a peer's model for shared rollouts.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

ADVANTAGE_EPS = 1e-4  # TRL's constant: keeps a near-uniform group from exploding


def group_advantages(rewards: Sequence[float]) -> list[float]:
    """Advantages of one group: reward minus the group mean, over the (unbiased) group std."""
    values = torch.tensor(list(rewards), dtype=torch.float64)
    if values.numel() < 2:
        return [0.0] * values.numel()
    centered = values - values.mean()
    return (centered / (values.std() + ADVANTAGE_EPS)).tolist()


@attrs.frozen
class PackedBatch:
    """Prompts left-padded and completions right-padded, so every completion starts at the same
    column and one `logits_to_keep` slice covers all of them (TRL's layout)."""

    prompt_ids: torch.Tensor  # (B, P)
    prompt_mask: torch.Tensor  # (B, P)
    completion_ids: torch.Tensor  # (B, C)
    completion_mask: torch.Tensor  # (B, C)

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)


def pack(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int) -> PackedBatch:
    width_p = max(len(p) for p in prompts)
    width_c = max(1, max(len(c) for c in completions))
    batch = len(prompts)
    prompt_ids = torch.full((batch, width_p), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((batch, width_p), dtype=torch.long)
    completion_ids = torch.full((batch, width_c), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((batch, width_c), dtype=torch.long)
    for row, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        if prompt:
            prompt_ids[row, width_p - len(prompt) :] = torch.tensor(prompt)
            prompt_mask[row, width_p - len(prompt) :] = 1
        if completion:
            completion_ids[row, : len(completion)] = torch.tensor(completion)
            completion_mask[row, : len(completion)] = 1
    return PackedBatch(prompt_ids, prompt_mask, completion_ids, completion_mask)


def position_ids_for(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding, so a prompt sees the same positions however it is padded."""
    return (attention_mask.cumsum(dim=1) - 1).clamp(min=0)


def completion_logps(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_width: int,
    temperature: float = 1.0,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-probability of every completion token (B, C), logits scaled by 1 / temperature.

    Only the last C + 1 positions go through the LM head, so the full (B, L, vocab) logits
    are never materialised.
    """
    if position_ids is None:
        position_ids = position_ids_for(attention_mask)
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        logits_to_keep=completion_width + 1,
        use_cache=False,
    ).logits[:, :-1, :]
    logits = logits.float() / temperature
    targets = input_ids[:, -completion_width:]
    # log_softmax then gather, written as logit - logsumexp to avoid a second (B, C, V) tensor
    picked = torch.gather(logits, dim=-1, index=targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


@attrs.frozen
class LossParts:
    loss: torch.Tensor
    mean_kl: float
    clip_fraction: float
    behaviour_weight: torch.Tensor | None = None
    """(B, C) detached truncated importance weights (1 on padding), when behaviour log-probs were given."""
    behaviour_truncated: torch.Tensor | None = None
    """(B, C) bool: tokens whose untruncated weight exceeded the cap (never on padding)."""


def behaviour_weights(
    old_logps: torch.Tensor, behaviour_logps: torch.Tensor, cap: float, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated importance weights min(exp(old - behaviour), cap) per token, and which tokens
    were truncated. Detached: the weight corrects which distribution the tokens came from, it is
    not a quantity to optimise (TRL and Yao et al. alike). Padding gets weight 1 and is never
    counted as truncated, whatever a caller put there.

    Where behaviour equals old, old - behaviour is exactly 0 and exp(0) is exactly 1, so the
    weighted loss is bit for bit the unweighted one (a cap >= 1 is required for that)."""
    with torch.no_grad():
        ratio = torch.exp(old_logps.detach() - behaviour_logps.detach())
        live = mask > 0
        truncated = (ratio > cap) & live
        weight = torch.where(live, torch.clamp(ratio, max=cap), torch.ones_like(ratio))
    return weight, truncated


def grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float,
    eps_high: float,
    beta: float = 0.0,
    ref_logps: torch.Tensor | None = None,
    aggregation: str = "token",
    normalizer: float | None = None,
    kl_ratio_correction: bool = True,
    behaviour_logps: torch.Tensor | None = None,
    behaviour_cap: float = 2.0,
) -> LossParts:
    """The clipped GRPO surrogate with optional KL, aggregated per token or per sequence.

    `normalizer` (token aggregation only) is the total completion-token count of the WHOLE batch
    when the loss is computed in micro-batches, so that the chunks' gradients add up to the
    full-batch gradient.

    `behaviour_logps` (B, C): the log-probs each token was SAMPLED with; the surrogate is then
    weighted per token by min(exp(old_logps - behaviour_logps), behaviour_cap) (truncated
    importance sampling; the KL term is not weighted, as in TRL). None: no weighting at all.
    A token the caller has no behaviour log-prob for should get its `old_logps` value: weight 1.
    """
    mask = mask.to(logps.dtype)
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    weight, truncated = None, None
    if behaviour_logps is not None:
        if not behaviour_cap >= 1.0:
            raise ValueError(f"behaviour_cap must be >= 1, got {behaviour_cap!r}")
        weight, truncated = behaviour_weights(old_logps, behaviour_logps, behaviour_cap, mask)
        per_token = per_token * weight
    mean_kl = 0.0
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta > 0 needs reference log-probs")
        delta = ref_logps - logps
        per_token_kl = torch.exp(delta) - delta - 1.0
        mean_kl = float((per_token_kl.detach() * mask).sum() / mask.sum().clamp(min=1.0))
        if kl_ratio_correction:
            # weighting by the (differentiable) ratio makes the KL gradient the unbiased reverse-KL
            # gradient (DeepSeek-V3.2); TRL does this by default, so do we
            per_token_kl = per_token_kl * ratio
        per_token = per_token + beta * per_token_kl
    if aggregation == "token":
        denominator = mask.sum().clamp(min=1.0) if normalizer is None else max(normalizer, 1.0)
        loss = (per_token * mask).sum() / denominator
    elif aggregation == "sequence":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    else:
        raise ValueError(f"unknown loss aggregation {aggregation!r}")
    with torch.no_grad():
        was_clipped = ((ratio < 1 - eps_low) & (adv < 0)) | ((ratio > 1 + eps_high) & (adv > 0))
        clip_fraction = float((was_clipped.to(mask.dtype) * mask).sum() / mask.sum().clamp(min=1.0))
    return LossParts(
        loss=loss,
        mean_kl=mean_kl,
        clip_fraction=clip_fraction,
        behaviour_weight=weight,
        behaviour_truncated=truncated,
    )
