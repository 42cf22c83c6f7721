"""Off-policy correction of shared rollouts: truncated importance sampling (trainer/grpo.py).

The pure loss: with behaviour = old log-probs it is today's loss and gradient bit for bit; with
a mismatch every token is weighted by exactly min(exp(old - behaviour), cap), never above the
cap, and only the surrogate (not the KL) is weighted. Generation reports the log-prob each
token was sampled with, and TrainerPolicy.train weights an external group by them (its metrics
say so), counts the completions it cannot correct, and trains as before with "none".
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import attrs
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from protocol.logprobs import pack_logprobs, unpack_logprobs
from protocol.messages import Completion, QuestionGroup, QuestionRef
from trainer.config import TrainerConfig
from trainer.generation import sample
from trainer.grpo import completion_logps, grpo_loss, pack
from trainer.policy import TrainerPolicy

# ---- the pure loss -------------------------------------------------------------------------


@st.composite
def loss_inputs(draw: st.DrawFn) -> dict:
    rows = draw(st.integers(1, 4))
    cols = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    generator = torch.Generator().manual_seed(seed)
    logps = -torch.rand(rows, cols, generator=generator) * 4.0
    # old log-probs: today's detached current ones, or a perturbed copy (clipping active)
    old = logps.clone() if draw(st.booleans()) else logps + 0.3 * torch.randn(rows, cols, generator=generator)
    lengths = [draw(st.integers(0, cols)) for _ in range(rows)]
    mask = torch.tensor([[1 if c < n else 0 for c in range(cols)] for n in lengths])
    return dict(
        logps=logps,
        old=old,
        advantages=torch.randn(rows, generator=generator),
        mask=mask,
        ref=logps - 0.5 * torch.rand(rows, cols, generator=generator),
        beta=draw(st.sampled_from([0.0, 0.04])),
        aggregation=draw(st.sampled_from(["token", "sequence"])),
        kl_ratio=draw(st.booleans()),
        cap=draw(st.sampled_from([1.0, 1.5, 2.0, 10.0, math.inf])),
        generator=generator,
    )


def _loss_and_grad(inputs: dict, behaviour: torch.Tensor | None) -> tuple:
    logps = inputs["logps"].clone().requires_grad_(True)
    parts = grpo_loss(
        logps,
        inputs["old"],
        inputs["advantages"],
        inputs["mask"],
        0.2,
        0.28,
        inputs["beta"],
        inputs["ref"],
        inputs["aggregation"],
        kl_ratio_correction=inputs["kl_ratio"],
        behaviour_logps=behaviour,
        behaviour_cap=inputs["cap"],
    )
    parts.loss.backward()
    assert logps.grad is not None
    return parts, logps.grad


@given(loss_inputs())
def test_behaviour_equal_to_old_gives_todays_loss_and_gradient_bit_for_bit(inputs: dict) -> None:
    today, today_grad = _loss_and_grad(inputs, None)
    corrected, corrected_grad = _loss_and_grad(inputs, inputs["old"].clone())
    assert torch.equal(today.loss, corrected.loss)
    assert torch.equal(today_grad, corrected_grad)
    assert today.clip_fraction == corrected.clip_fraction and today.mean_kl == corrected.mean_kl
    assert corrected.behaviour_weight is not None and corrected.behaviour_truncated is not None
    assert torch.equal(corrected.behaviour_weight, torch.ones_like(inputs["old"]))
    assert not bool(corrected.behaviour_truncated.any())


@given(loss_inputs(), st.floats(0.0, 3.0))
def test_a_mismatch_weights_each_token_by_the_truncated_ratio(inputs: dict, spread: float) -> None:
    old, mask = inputs["old"], inputs["mask"].bool()
    behaviour = old + spread * torch.randn(old.shape, generator=inputs["generator"])
    cap = inputs["cap"]
    parts, grad = _loss_and_grad(inputs, behaviour)
    weight = parts.behaviour_weight
    assert weight is not None and parts.behaviour_truncated is not None
    expected = torch.minimum(torch.exp(old - behaviour), torch.tensor(cap))
    assert torch.equal(weight[mask], expected[mask])  # token by token, exactly the formula
    assert bool((weight <= cap).all())
    assert torch.equal(weight[~mask], torch.ones_like(weight[~mask]))  # padding is never weighted
    assert torch.equal(parts.behaviour_truncated, (torch.exp(old - behaviour) > cap) & mask)
    # The weight multiplies each token's surrogate (and so its gradient); the KL is not weighted.
    if inputs["beta"] == 0.0:
        _, unweighted_grad = _loss_and_grad(inputs, None)
        torch.testing.assert_close(grad, unweighted_grad * weight, rtol=1e-5, atol=1e-7)


def test_a_cap_below_one_is_refused() -> None:
    logps = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="behaviour_cap"):
        grpo_loss(
            logps, logps, torch.ones(1), torch.ones(1, 2), 0.2, 0.2, behaviour_logps=logps, behaviour_cap=0.5
        )
    with pytest.raises(ValueError, match="behaviour_cap"):
        TrainerConfig(behaviour_cap=0.9)
    with pytest.raises(ValueError):
        TrainerConfig(behaviour_correction="sometimes")


# ---- generation and training on a real tiny model ----------------------------------------


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> TrainerPolicy:
    config = TrainerConfig(
        data_dir=str(tmp_path_factory.mktemp("offpolicy")),
        tasks=("basic_arithmetic", "calendar_arithmetic"),
        tiny_hidden_size=64,
        tiny_pretrain_steps=0,
        threads=1,
        max_new_tokens=12,
        num_generations=4,
        format_reward=0.5,
        seed=5,
    )
    return TrainerPolicy(config)


def _training_refs(policy: TrainerPolicy, count: int) -> list[QuestionRef]:
    refs = (QuestionRef("basic_arithmetic", 5, i) for i in range(3, 200))
    return [ref for ref in refs if not policy.registry.is_heldout(ref)][:count]


def _with_spread(groups: list[QuestionGroup]) -> list[QuestionGroup]:
    """The same completions with rewards that differ, so that every group is trained on."""
    return [
        QuestionGroup(
            g.question, tuple(attrs.evolve(c, reward=float(i % 2)) for i, c in enumerate(g.completions))
        )
        for g in groups
    ]


def _current_logps(policy: TrainerPolicy, ref: QuestionRef, ids: list[int]) -> list[float]:
    prompt = policy.prompt_ids(ref)
    batch = pack([prompt], [ids], policy.tokenizer.pad_token_id)
    policy.model.eval()
    with torch.no_grad():
        values = completion_logps(
            policy.model, batch.input_ids, batch.attention_mask, len(ids), policy.config.temperature
        )
    return values[0].tolist()


def test_generated_completions_carry_the_logprobs_they_were_sampled_with(policy: TrainerPolicy) -> None:
    groups = policy.generate(_training_refs(policy, 2))
    for group in groups:
        for completion in group.completions:
            sampled = unpack_logprobs(completion.logprobs)
            ids = policy.completion_ids(group.question, completion.text)
            assert len(sampled) == len(ids) >= 1
            assert all(value <= 0.0 for value in sampled)
            # the distribution that sampled them is the current model's, logits / temperature
            assert sampled == pytest.approx(_current_logps(policy, group.question, ids), abs=1e-4)


def test_nucleus_and_greedy_logprobs_are_those_of_the_sampling_distribution(policy: TrainerPolicy) -> None:
    prompt = policy.prompt_ids(_training_refs(policy, 1)[0])
    eos, pad = policy.tokenizer.eos_token_id, policy.tokenizer.pad_token_id
    policy.model.eval()

    def sampled(temperature: float, top_p: float = 1.0) -> tuple[list[list[int]], list[list[float]]]:
        logprobs: list[list[float]] = []
        generator = torch.Generator().manual_seed(1)
        rows = sample(
            policy.model, [prompt], 3, 8, temperature, eos, pad, generator, top_p=top_p, logprobs=logprobs
        )
        assert [len(row) for row in logprobs] == [len(row) for row in rows]
        return rows, logprobs

    rows, logprobs = sampled(0.7)
    for row, values in zip(rows, logprobs, strict=True):  # the full distribution: exactly it
        with torch.no_grad():
            assert values == pytest.approx(_current_logps_at(policy, prompt, row, 0.7), abs=1e-4)
    rows, logprobs = sampled(0.7, top_p=0.5)  # the nucleus, renormalised: more likely than in full
    with torch.no_grad():
        full = [_current_logps_at(policy, prompt, row, 0.7) for row in rows]
    gaps = [
        value - f
        for values, fs in zip(logprobs, full, strict=True)
        for value, f in zip(values, fs, strict=True)
    ]
    assert min(gaps) > -1e-4 and max(gaps) > 1e-3
    assert all(value <= 0.0 for values in logprobs for value in values)
    _, logprobs = sampled(0.0)
    assert all(value == 0.0 for row in logprobs for value in row)  # greedy: a point mass


def _current_logps_at(
    policy: TrainerPolicy, prompt: list[int], ids: list[int], temperature: float
) -> list[float]:
    batch = pack([prompt], [ids], policy.tokenizer.pad_token_id)
    return completion_logps(policy.model, batch.input_ids, batch.attention_mask, len(ids), temperature)[
        0
    ].tolist()


def _shifted(completion: Completion, scale: float, offset: float) -> Completion:
    """The completion as if a peer whose log-probs were `scale * ours + offset` had sampled it."""
    values = [min(0.0, scale * v + offset) for v in unpack_logprobs(completion.logprobs)]
    return attrs.evolve(completion, logprobs=pack_logprobs(values))


def _fresh_state(policy: TrainerPolicy) -> tuple:
    return copy.deepcopy(policy.model.state_dict()), copy.deepcopy(policy.optimizer.state_dict()), policy.step


def _restore(policy: TrainerPolicy, state: tuple) -> None:
    policy.model.load_state_dict(state[0])
    policy.optimizer.load_state_dict(state[1])
    policy.step = state[2]


def test_train_weights_an_external_group_by_its_behaviour_logprobs(policy: TrainerPolicy) -> None:
    local = _with_spread(policy.generate(_training_refs(policy, 3)))
    start = _fresh_state(policy)

    # Our own, on-policy groups: every weight is 1 up to float noise, nothing truncated.
    metrics = policy.train(local)
    assert metrics["behaviour_groups"] == 3 and metrics["behaviour_missing"] == 0
    assert metrics["behaviour_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["behaviour_weight_max"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["behaviour_truncated"] == 0.0
    _restore(policy, start)

    # One external group, sampled by "another policy": half of its completions far less likely
    # there (weights capped at 2), the other half more likely (weights below 1).
    first = local[0]
    external = QuestionGroup(
        first.question,
        tuple(
            _shifted(c, 2.0, -1.0) if i % 2 == 0 else _shifted(c, 0.5, 0.0)
            for i, c in enumerate(first.completions)
        ),
    )
    corrected = policy.train([external])
    corrected_weights = copy.deepcopy(policy.model.state_dict())
    assert corrected["behaviour_groups"] == 1 and corrected["behaviour_missing"] == 0
    assert corrected["behaviour_weight_max"] == 2.0
    assert 0.0 < corrected["behaviour_truncated"] < 1.0
    assert corrected["behaviour_weight_mean"] != pytest.approx(1.0, abs=1e-3)
    _restore(policy, start)

    # The same group trained as if we had sampled it (ratio one): another update.
    policy.config = attrs.evolve(policy.config, behaviour_correction="none")
    try:
        plain = policy.train([external])
    finally:
        policy.config = attrs.evolve(policy.config, behaviour_correction="tis")
    assert plain["behaviour_groups"] == 0 and plain["behaviour_weight_mean"] == 1.0
    assert plain["loss"] != corrected["loss"]
    moved = [not torch.equal(corrected_weights[k], v) for k, v in policy.model.state_dict().items()]
    assert any(moved)
    _restore(policy, start)


def test_completions_without_usable_logprobs_keep_weight_one_and_are_counted(policy: TrainerPolicy) -> None:
    group = _with_spread(policy.generate(_training_refs(policy, 1)))[0]
    start = _fresh_state(policy)
    first, second, *rest = group.completions
    wrong_length = attrs.evolve(
        first, logprobs=pack_logprobs([-1.0] * (len(unpack_logprobs(first.logprobs)) + 3))
    )
    # a text we never sampled, sent without log-probs: nothing remembered, nothing carried
    stranger = Completion("<answer>12</answer>", second.reward)
    external = QuestionGroup(group.question, (wrong_length, stranger, *rest))
    metrics = policy.train([external])
    assert metrics["behaviour_missing"] == 2
    assert metrics["behaviour_groups"] == 1  # the rest of the group is still corrected
    _restore(policy, start)
    # A completion whose Completion lost its log-probs is still ours: the remembered ones serve.
    stripped = QuestionGroup(group.question, tuple(attrs.evolve(c, logprobs=b"") for c in group.completions))
    metrics = policy.train([stripped])
    assert metrics["behaviour_missing"] == 0 and metrics["behaviour_groups"] == 1
    _restore(policy, start)


def test_the_appended_eos_after_a_stop_text_keeps_weight_one(policy: TrainerPolicy, tmp_path: Path) -> None:
    eos = policy.tokenizer.eos_token_id
    ids = [*policy.tokenizer("<answer>4</answer>", add_special_tokens=False)["input_ids"], eos]
    ref = _training_refs(policy, 1)[0]
    completion = Completion("<answer>4</answer>", 1.0, pack_logprobs([-0.5] * (len(ids) - 1)))
    assert policy.behaviour_logps(ref, completion, ids) == [-0.5] * (len(ids) - 1)
    assert policy.behaviour_logps(ref, completion, ids[:-1]) == [-0.5] * (len(ids) - 1)
    assert policy.behaviour_logps(ref, completion, ids[:-2]) is None
    bad = Completion("<answer>4</answer>", 1.0, pack_logprobs([math.nan] * len(ids)))
    assert policy.behaviour_logps(ref, bad, ids) is None
    as_list = Completion("<answer>4</answer>", 1.0, [-0.5] * len(ids))  # type: ignore[arg-type]
    assert policy.behaviour_logps(ref, as_list, ids) is None
