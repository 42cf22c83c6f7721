"""Pinned training rules: what a GRPO step computes (trainer/grpo.py), which weights a run keeps
(trainer/selection.py) and which questions it trains on (trainer/tasks.py).

Each test pins a behaviour the rest of the trainer relies on, with values worked out by hand:
the advantage's sign and scale, the padded layout every completion shares, the clipped
surrogate and its clip fraction, the KL term, the loss's aggregation, the task weights and the
index range of sampled questions. Written against the survivors of scripts/mutation.sh on
those modules.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from protocol.messages import QuestionRef
from protocol.questions import heldout_key
from trainer.content_keys import content_key
from trainer.grpo import (
    behaviour_weights,
    completion_logps,
    group_advantages,
    grpo_loss,
    pack,
    position_ids_for,
)
from trainer.rewards import format_score
from trainer.selection import BestByValidation
from trainer.tasks import PROMPT_TEMPLATE, ReasoningGymRegistry, TaskError

# ---- advantages: sign and scale ----


def test_a_group_of_one_or_none_has_no_advantage() -> None:
    assert group_advantages([0.7]) == [0.0]
    assert group_advantages([]) == []


def test_a_pair_already_has_advantages_of_opposite_sign() -> None:
    """Two completions are the smallest group that teaches: the better one is pushed up."""
    low, high = group_advantages([0.0, 1.0])
    assert high > 0 > low
    assert high == pytest.approx(1 / math.sqrt(2), rel=1e-3)


def test_a_uniform_group_has_exactly_zero_advantages() -> None:
    assert group_advantages([0.5, 0.5, 0.5]) == [0.0, 0.0, 0.0]


def test_advantages_are_computed_in_double_precision() -> None:
    """Rewards like 0.1 are not float32 numbers: a float32 advantage is off by ~1e-7."""
    rewards = [0.1, 0.2, 0.7]
    mean = sum(rewards) / 3
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / 2)
    expected = [(r - mean) / (std + 1e-4) for r in rewards]
    assert group_advantages(rewards) == pytest.approx(expected, rel=1e-12, abs=1e-15)


# ---- the padded layout: one completion column for every row ----


def test_prompts_are_left_padded_and_completions_right_padded() -> None:
    batch = pack([[1, 2, 3], [4]], [[5], [6, 7]], pad_id=9)
    assert batch.prompt_ids.tolist() == [[1, 2, 3], [9, 9, 4]]
    assert batch.prompt_mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch.completion_ids.tolist() == [[5, 9], [6, 7]]
    assert batch.completion_mask.tolist() == [[1, 0], [1, 1]]
    assert batch.input_ids.tolist() == [[1, 2, 3, 5, 9], [9, 9, 4, 6, 7]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 0], [0, 0, 1, 1, 1]]
    # integer tensors: the model looks the ids up in its embedding and the masks mark positions
    for tensor in (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask):
        assert tensor.dtype == torch.long


def test_a_prompt_without_its_completion_is_refused() -> None:
    with pytest.raises(ValueError):
        pack([[1], [2]], [[3]], pad_id=0)


def test_empty_completions_still_get_one_masked_column() -> None:
    batch = pack([[1], []], [[], []], pad_id=0)
    assert batch.completion_ids.tolist() == [[0], [0]]
    assert batch.completion_mask.tolist() == [[0], [0]]
    assert batch.prompt_mask.tolist() == [[1], [0]]


def test_positions_skip_left_padding() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids_for(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


class _FixedLogits(torch.nn.Module):
    """A causal LM stand-in whose logits are a fixed tensor; it records how it was called."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits
        self.calls: list[dict[str, Any]] = []

    def forward(self, **kwargs: Any) -> SimpleNamespace:
        self.calls.append(kwargs)
        return SimpleNamespace(logits=self.logits[:, -kwargs["logits_to_keep"] :, :])


def test_completion_logps_are_the_tokens_log_softmax_at_the_sampling_temperature() -> None:
    torch.manual_seed(0)
    logits = torch.randn(1, 5, 5)  # positions 0..4 of a 3-token prompt + 2-token completion
    input_ids = torch.tensor([[1, 2, 0, 3, 4]])
    attention = torch.tensor([[0, 1, 1, 1, 1]])
    model = _FixedLogits(logits)
    got = completion_logps(model, input_ids, attention, completion_width=2, temperature=2.0)
    # token 3 is predicted at position 2, token 4 at position 3
    expected = torch.log_softmax(logits[0, 2:4] / 2.0, dim=-1)[[0, 1], [3, 4]]
    assert torch.allclose(got[0], expected, atol=1e-6)
    plain = completion_logps(model, input_ids, attention, completion_width=2)  # temperature 1
    assert torch.allclose(plain[0], torch.log_softmax(logits[0, 2:4], dim=-1)[[0, 1], [3, 4]], atol=1e-6)
    call = model.calls[0]
    assert call["logits_to_keep"] == 3 and call["use_cache"] is False
    assert call["position_ids"].tolist() == [[0, 0, 1, 2, 3]]
    assert torch.equal(call["attention_mask"], attention)


# ---- the clipped surrogate ----


def _one_token_rows(ratios: list[float], advantages: list[float]) -> dict[str, torch.Tensor]:
    old = torch.full((len(ratios), 1), -1.0)
    logps = (old + torch.log(torch.tensor(ratios)).unsqueeze(1)).requires_grad_(True)
    return {
        "logps": logps,
        "old_logps": old,
        "advantages": torch.tensor(advantages),
        "mask": torch.ones(len(ratios), 1),
    }


def test_the_surrogate_clips_only_the_side_the_advantage_pushes_towards() -> None:
    """ratio 1.5 with A > 0 is clipped at 1 + eps_high (no gain from moving further); ratio 0.5
    with A < 0 at 1 - eps_low; the other two are not clipped and keep their gradient."""
    rows = _one_token_rows([1.5, 1.5, 0.5, 0.5], [1.0, -1.0, 1.0, -1.0])
    parts = grpo_loss(**rows, eps_low=0.2, eps_high=0.28)
    per_token = [-1.28, 1.5, -0.5, 0.8]
    assert parts.loss.item() == pytest.approx(sum(per_token) / 4, rel=1e-5)
    assert parts.clip_fraction == pytest.approx(0.5)
    parts.loss.backward()
    grad = rows["logps"].grad[:, 0]
    assert grad[0].item() == 0.0 and grad[3].item() == 0.0  # clipped: no gradient
    # d(-ratio * A)/d logp / 4 tokens
    assert grad[1].item() == pytest.approx(1.5 / 4, rel=1e-5)
    assert grad[2].item() == pytest.approx(-0.5 / 4, rel=1e-5)


def test_the_clip_fraction_counts_only_tokens_clipped_on_their_advantages_side() -> None:
    """A token is clipped when its ratio left the trust region on the side its advantage
    pushes towards; a token inside the region, on the other side, or with no advantage is not."""
    ratios = [1.5, 1.5, 0.5, 0.5, 1.0, 1.0, 1.5, 0.5, 0.5]
    advantages = [1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 0.0, 0.0, 0.5]
    clipped = [True, False, False, True, False, False, False, False, False]
    parts = grpo_loss(**_one_token_rows(ratios, advantages), eps_low=0.2, eps_high=0.28)
    assert parts.clip_fraction == pytest.approx(sum(clipped) / len(clipped))


def test_a_ratio_exactly_at_the_clip_bound_is_not_counted_as_clipped() -> None:
    logps = torch.zeros(2, 1)  # ratio exactly 1.0 = 1 - 0 = 1 + 0
    parts = grpo_loss(logps, logps, torch.tensor([1.0, -1.0]), torch.ones(2, 1), eps_low=0.0, eps_high=0.0)
    assert parts.clip_fraction == 0.0


def test_the_clip_fraction_counts_live_tokens_only() -> None:
    rows = _one_token_rows([1.5, 1.5], [1.0, 1.0])
    rows["mask"] = torch.tensor([[1.0], [0.0]])
    assert grpo_loss(**rows, eps_low=0.2, eps_high=0.2).clip_fraction == pytest.approx(1.0)


def test_token_aggregation_weighs_every_token_and_sequence_aggregation_every_completion() -> None:
    logps = torch.zeros(2, 2)
    advantages = torch.tensor([1.0, 2.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    args = {"logps": logps, "old_logps": logps, "advantages": advantages, "mask": mask}
    # ratio 1 everywhere: every live token costs -A
    assert grpo_loss(**args, eps_low=0.2, eps_high=0.2).loss.item() == pytest.approx(-4 / 3)
    sequence = grpo_loss(**args, eps_low=0.2, eps_high=0.2, aggregation="sequence")
    assert sequence.loss.item() == pytest.approx(-1.5)
    # micro-batches divide by the whole batch's token count; never by less than one token
    assert grpo_loss(**args, eps_low=0.2, eps_high=0.2, normalizer=8).loss.item() == pytest.approx(-0.5)
    assert grpo_loss(**args, eps_low=0.2, eps_high=0.2, normalizer=0.5).loss.item() == pytest.approx(-4.0)
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        grpo_loss(**args, eps_low=0.2, eps_high=0.2, aggregation="batch")


def test_per_token_advantages_are_used_as_given() -> None:
    logps = torch.zeros(2, 2)
    parts = grpo_loss(logps, logps, torch.tensor([[1.0, 3.0], [2.0, 6.0]]), torch.ones(2, 2), 0.2, 0.2)
    assert parts.loss.item() == pytest.approx(-3.0)


def test_an_all_padding_batch_costs_nothing() -> None:
    logps = torch.zeros(1, 2)
    for aggregation in ("token", "sequence"):
        parts = grpo_loss(
            logps, logps, torch.tensor([1.0]), torch.zeros(1, 2), 0.2, 0.2, aggregation=aggregation
        )
        assert parts.loss.item() == 0.0 and parts.clip_fraction == 0.0


# ---- the KL term ----


def _kl(delta: float) -> float:
    return math.exp(delta) - delta - 1.0


def test_the_kl_term_is_k3_of_the_reference_weighted_by_beta_and_the_ratio() -> None:
    old = torch.tensor([[-1.0, -1.0]])
    logps = old + torch.log(torch.tensor([[1.5, 1.0]]))
    ref = logps + torch.tensor([[0.5, -0.25]])
    mask = torch.tensor([[1.0, 1.0]])
    zero = torch.tensor([0.0])  # no surrogate: only the KL term remains
    corrected = grpo_loss(logps, old, zero, mask, 0.2, 0.2, beta=0.1, ref_logps=ref)
    plain = grpo_loss(logps, old, zero, mask, 0.2, 0.2, beta=0.1, ref_logps=ref, kl_ratio_correction=False)
    assert corrected.mean_kl == pytest.approx((_kl(0.5) + _kl(-0.25)) / 2, rel=1e-5)
    assert plain.mean_kl == pytest.approx(corrected.mean_kl)
    assert plain.loss.item() == pytest.approx(0.1 * (_kl(0.5) + _kl(-0.25)) / 2, rel=1e-5)
    assert corrected.loss.item() == pytest.approx(0.1 * (1.5 * _kl(0.5) + _kl(-0.25)) / 2, rel=1e-5)


def test_the_mean_kl_leaves_out_padding_and_needs_a_reference() -> None:
    logps = torch.zeros(1, 2)
    ref = torch.tensor([[0.5, 7.0]])
    mask = torch.tensor([[1.0, 0.0]])
    parts = grpo_loss(logps, logps, torch.tensor([0.0]), mask, 0.2, 0.2, beta=0.1, ref_logps=ref)
    assert parts.mean_kl == pytest.approx(_kl(0.5), rel=1e-5)
    assert grpo_loss(logps, logps, torch.tensor([0.0]), mask, 0.2, 0.2).mean_kl == 0.0
    with pytest.raises(ValueError, match=r"^beta > 0 needs reference log-probs$"):
        grpo_loss(logps, logps, torch.tensor([0.0]), mask, 0.2, 0.2, beta=0.1)


# ---- truncated importance weights ----


def test_behaviour_weights_are_capped_and_padding_weighs_one() -> None:
    old = torch.zeros(1, 4)
    behaviour = torch.log(torch.tensor([[0.25, 1.0, 4.0, 0.01]]))  # ratios 4, 1, 0.25, 100
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    weight, truncated = behaviour_weights(old, behaviour, cap=2.0, mask=mask)
    assert weight[0].tolist() == pytest.approx([2.0, 1.0, 0.25, 1.0])
    assert truncated.tolist() == [[True, False, False, False]]
    # at the cap exactly: kept, not counted as truncated
    at_cap = torch.tensor([[math.log(2.0)]], dtype=torch.float64)
    behaviour = torch.zeros(1, 1, dtype=torch.float64)
    weight, truncated = behaviour_weights(at_cap, behaviour, cap=2.0, mask=torch.ones(1, 1))
    assert weight.item() == 2.0 and not truncated.item()


def test_the_default_behaviour_cap_is_two() -> None:
    old = torch.zeros(1, 1)
    logps = old.clone()
    parts = grpo_loss(logps, old, torch.tensor([1.0]), torch.ones(1, 1), 0.2, 0.2, behaviour_logps=old - 3.0)
    assert parts.behaviour_weight.item() == 2.0 and parts.behaviour_truncated.item()
    assert parts.loss.item() == pytest.approx(-2.0)
    with pytest.raises(ValueError, match="behaviour_cap must be >= 1"):
        grpo_loss(logps, old, torch.tensor([1.0]), torch.ones(1, 1), 0.2, 0.2, behaviour_logps=old,
                  behaviour_cap=0.5)  # fmt: skip


# ---- which questions a run trains on ----

TWO_TASKS = ("basic_arithmetic", "leg_counting")


def test_task_weights_decide_which_tasks_are_drawn() -> None:
    only_second = ReasoningGymRegistry(TWO_TASKS, weights=(0.0, 1.0))
    drawn = only_second.sample(random.Random(0), 40, dataset_seed=1)
    assert {ref.task for ref in drawn} == {"leg_counting"}
    # no weights: every task equally likely (200 draws, each share well inside 0.35-0.65)
    counts = Counter(ref.task for ref in ReasoningGymRegistry(TWO_TASKS).sample(random.Random(1), 200, 1))
    assert set(counts) == set(TWO_TASKS) and min(counts.values()) > 70
    with pytest.raises(TaskError, match="1 weights for 2 tasks"):
        ReasoningGymRegistry(TWO_TASKS, weights=(1.0,))
    with pytest.raises(TaskError, match="no tasks"):
        ReasoningGymRegistry(())


def test_sampled_questions_lie_in_the_index_range_and_are_never_held_out() -> None:
    registry = ReasoningGymRegistry(("basic_arithmetic",))
    drawn = registry.sample(random.Random(2), 30, dataset_seed=4, index_range=(100, 110))
    assert len(drawn) == 30
    assert all(ref.dataset_seed == 4 and 100 <= ref.index < 110 for ref in drawn)
    assert not any(registry.is_heldout(ref) for ref in drawn)


def test_a_task_with_nothing_trainable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = ReasoningGymRegistry(("basic_arithmetic",))
    monkeypatch.setattr(registry, "is_heldout", lambda ref: True)
    with pytest.raises(TaskError, match="basic_arithmetic: no trainable question"):
        registry.sample(random.Random(0), 1, dataset_seed=0)


def test_the_prompt_asks_for_the_answer_in_the_tags_the_scorer_reads() -> None:
    registry = ReasoningGymRegistry(("basic_arithmetic",))
    ref = QuestionRef("basic_arithmetic", 0, 3)
    prompt, answer = registry.question(ref)
    question = registry.entry(ref)["question"]
    assert prompt == PROMPT_TEMPLATE.format(question=question)
    assert prompt.startswith("Solve the problem.") and prompt.endswith("\n\nResponse:")
    assert "between <answer> and </answer>" in prompt and f"Problem: {question}" in prompt
    assert answer is not None and registry.correctness(ref, answer) == 1.0
    assert registry.correctness(ref, "surely not " + answer) < 1.0


def test_a_negative_index_is_refused_and_scores_zero() -> None:
    registry = ReasoningGymRegistry(("basic_arithmetic",))
    bad = QuestionRef("basic_arithmetic", 0, -1)
    with pytest.raises(TaskError, match="bad question index"):
        registry.question(bad)
    assert registry.score(bad, "<answer>1</answer>") == 0.0
    assert registry.correctness(bad, "1") == 0.0
    assert registry.is_heldout(bad)  # never trained on


def test_a_task_outside_the_registry_is_refused() -> None:
    registry = ReasoningGymRegistry(("basic_arithmetic",))
    with pytest.raises(TaskError, match="not in this registry's task list"):
        registry.question(QuestionRef("leg_counting", 0, 0))


# ---- which weights a run keeps ----


class _DeviceTensor:
    """A parameter on some accelerator: records where a copy of it was asked to go."""

    def __init__(self, copies: list[tuple[object, bool]]) -> None:
        self.copies = copies

    def detach(self) -> _DeviceTensor:
        return self

    def to(self, device: object = None, copy: bool = False) -> str:
        self.copies.append((device, copy))
        return f"copy on {device}"


def test_the_kept_weights_are_a_copy_on_the_cpu_whatever_the_models_device() -> None:
    """A GPU run must not hold a second copy of the model in device memory."""
    copies: list[tuple[object, bool]] = []
    model = SimpleNamespace(state_dict=lambda: {"w": _DeviceTensor(copies)})
    best = BestByValidation(window=1)
    assert best.offer(0, 0.5, model)
    assert copies == [("cpu", True)]
    loaded: list[dict[str, object]] = []
    best.restore(SimpleNamespace(load_state_dict=loaded.append))
    assert loaded == [{"w": "copy on cpu"}]


def test_restoring_before_any_evaluation_names_the_cause() -> None:
    message = "^" + re.escape("no weights were selected: no validation evaluation ran") + "$"
    with pytest.raises(RuntimeError, match=message):
        BestByValidation().restore(torch.nn.Linear(1, 1))


def test_a_format_only_reward_pays_a_well_formed_wrong_answer() -> None:
    registry = ReasoningGymRegistry(("basic_arithmetic",), format_weight=1.0)
    text = "<answer>definitely wrong</answer>"
    assert registry.score(QuestionRef("basic_arithmetic", 0, 2), text) == format_score(text) > 0.0


def test_a_question_without_a_reference_answer_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = ReasoningGymRegistry(("basic_arithmetic",))
    ref = QuestionRef("basic_arithmetic", 0, 1)
    for entry, answer in (({"question": "q?"}, None), ({"question": "q?", "answer": 12}, "12")):
        monkeypatch.setattr(registry, "_dataset_and_entry", lambda _ref, entry=entry: (None, entry))
        assert registry.question(ref) == (PROMPT_TEMPLATE.format(question="q?"), answer)


def test_content_keys_and_the_held_out_split_are_the_tasks_own() -> None:
    """leg_counting's key is its animals and counts, not the question's text; the held-out split
    hashes the task's name with the key, so a task's share is its own."""
    registry = ReasoningGymRegistry(("leg_counting",))
    refs = [QuestionRef("leg_counting", 3, i) for i in range(200)]
    for ref in refs[:5]:
        entry = registry.entry(ref)
        assert registry.content_key(ref) == content_key("leg_counting", entry) != content_key("other", entry)
    verdicts = [registry.is_heldout(ref) for ref in refs]
    assert verdicts == [heldout_key("leg_counting", registry.content_key(ref)) for ref in refs]
    assert verdicts != [heldout_key("other", registry.content_key(ref)) for ref in refs]


def test_the_evaluation_set_is_the_registrys_seed_and_difficulty(monkeypatch: pytest.MonkeyPatch) -> None:
    """The on-disk set is keyed by (tasks, difficulty, seed, ...): a registry of another
    difficulty or seed must not read this one's set."""
    asked: list[tuple[object, ...]] = []

    def cached(
        tasks: object, seed: object, per_task: object, key: object, split: object, difficulty: object
    ) -> list:
        asked.append((tasks, seed, per_task, split, difficulty))
        return [QuestionRef("leg_counting", 9, 1)]

    monkeypatch.setattr("trainer.tasks.cached_evaluation_questions", cached)
    registry = ReasoningGymRegistry(("leg_counting",), difficulty=2)
    assert registry.eval_questions(4, 9, "test") == [QuestionRef("leg_counting", 9, 1)]
    registry.eval_questions(4, 9, "test")  # memoised: asked once
    assert asked == [(("leg_counting",), 9, 4, "test", 2)]


def test_a_difficulty_of_zero_draws_from_the_curriculums_lowest_level() -> None:
    """Difficulty 0 is a level (the easiest), not "no difficulty": the items differ from the
    task's default configuration's."""
    import reasoning_gym.factory as factory

    curriculum = factory.create_curriculum("leg_counting")
    curriculum.set_global_level(0)
    config = curriculum.generate_configuration({"seed": 3, "size": 1})
    level_zero = factory.DATASETS["leg_counting"][0](config=config)
    leveled = ReasoningGymRegistry(("leg_counting",), difficulty=0)
    default = ReasoningGymRegistry(("leg_counting",))
    for index in range(3):
        ref = QuestionRef("leg_counting", 3, index)
        assert leveled.entry(ref)["question"] == level_zero[index]["question"]
        assert leveled.entry(ref)["question"] != default.entry(ref)["question"]


def test_refusals_name_their_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TaskError, match=r"^no tasks given$"):
        ReasoningGymRegistry(())
    registry = ReasoningGymRegistry(("basic_arithmetic",))
    with pytest.raises(TaskError, match=r"^task 'codeio' is denied: unsafe: runs exec\(\)"):
        registry.question(QuestionRef("codeio", 0, 0))
    dataset = registry._dataset("basic_arithmetic", 0)

    def boom(self: object, index: int) -> dict[str, str]:
        raise RuntimeError("boom")

    monkeypatch.setattr(type(dataset), "__getitem__", boom)
    with pytest.raises(TaskError, match=r"^basic_arithmetic\[5\] failed to generate: boom$"):
        registry.question(QuestionRef("basic_arithmetic", 0, 5))
