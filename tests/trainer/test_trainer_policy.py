"""TrainerPolicy: generation, GRPO update semantics, external rollouts, cancellation, checkpoints."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from protocol.messages import Completion, QuestionGroup, QuestionRef
from protocol.sampling import rewards_differ
from trainer import checkpoint
from trainer.config import TrainerConfig
from trainer.generation import Cancelled
from trainer.grpo import group_advantages
from trainer.policy import TrainerPolicy

TASKS = ("basic_arithmetic", "calendar_arithmetic")


def small_config(data_dir: Path, **overrides: object) -> TrainerConfig:
    fields = dict(
        data_dir=str(data_dir),
        tasks=TASKS,
        tiny_hidden_size=64,
        tiny_pretrain_steps=0,
        threads=1,
        max_new_tokens=16,
        num_generations=4,
        format_reward=0.5,
        seed=3,
    )
    fields.update(overrides)
    return TrainerConfig(**fields)


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir whose `models/` holds the small tiny model, built here: every test that uses it
    passes alone and in any order (none relies on an earlier test having built it)."""
    folder = tmp_path_factory.mktemp("policy")
    TrainerPolicy(small_config(folder))
    return folder


@given(st.lists(st.floats(min_value=0, max_value=1), min_size=2, max_size=16))
def test_group_advantages_are_centered_and_zero_for_uniform_groups(rewards: list[float]) -> None:
    advantages = group_advantages(rewards)
    assert len(advantages) == len(rewards)
    assert abs(sum(advantages)) < 1e-6 * len(rewards) + 1e-9
    if not rewards_differ(rewards):
        assert all(abs(a) < 1e-3 for a in advantages)
    else:
        best = max(range(len(rewards)), key=rewards.__getitem__)
        assert advantages[best] > 0


def test_generate_returns_g_scored_completions_and_is_seeded(model_cache: Path) -> None:
    policy = TrainerPolicy(small_config(model_cache))
    questions = [QuestionRef("basic_arithmetic", 3, 1), QuestionRef("calendar_arithmetic", 3, 2)]
    groups = policy.generate(questions)
    assert [g.question for g in groups] == questions
    for group in groups:
        assert len(group.completions) == 4
        for completion in group.completions:
            assert completion.reward == policy.registry.score(group.question, completion.text)
    again = TrainerPolicy(small_config(model_cache)).generate(questions)
    assert again == groups  # same seed, same model: same samples


def test_train_drops_zero_advantage_groups_and_updates_on_informative_ones(model_cache: Path) -> None:
    policy = TrainerPolicy(small_config(model_cache))
    # a training question: the trainer drops held-out ones (either split) before anything else
    ref = next(
        r
        for r in (QuestionRef("basic_arithmetic", 3, i) for i in range(7, 100))
        if not policy.registry.is_heldout(r)
    )
    flat = QuestionGroup(ref, tuple(Completion(f"text {i}", 0.5) for i in range(4)))
    before = copy.deepcopy(policy.model.state_dict())
    metrics = policy.train([flat])
    assert metrics["groups_used"] == 0 and metrics["updated"] == 0 and policy.step == 0
    assert all(torch.equal(before[k], v) for k, v in policy.model.state_dict().items())

    # an external group: plain text this policy never generated, re-tokenized locally
    external = QuestionGroup(
        ref,
        (
            Completion("<answer>12</answer>", 1.0),
            Completion("no idea", 0.0),
            Completion("<answer>", 0.2),
            Completion("", 0.0),
        ),
    )
    metrics = policy.train([flat, external])
    assert metrics["groups_used"] == 1 and metrics["updated"] == 1 and policy.step == 1
    assert metrics["loss"] == metrics["loss"]  # finite, not NaN
    assert any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())


def test_micro_batches_give_the_full_batch_gradient(model_cache: Path) -> None:
    whole = TrainerPolicy(small_config(model_cache, lr=1e-2))
    chunked = TrainerPolicy(small_config(model_cache, lr=1e-2, micro_batch_size=3))
    questions = [QuestionRef("basic_arithmetic", 3, i) for i in range(3)]
    groups = whole.generate(questions)
    # the chunked policy samples the same texts, so both train on the same cached sampled token ids
    assert chunked.generate(questions) == groups
    groups = [
        QuestionGroup(
            g.question, tuple(Completion(c.text, float(i % 2)) for i, c in enumerate(g.completions))
        )
        for g in groups
    ]
    captured: dict[str, list[torch.Tensor]] = {}
    for label, policy in (("whole", whole), ("chunked", chunked)):
        # capture the gradient the optimizer would apply (Adam's first step is ~sign(grad), which
        # would hide or exaggerate float noise; the gradient itself is what must match)
        def capture(*_args: object, _policy: TrainerPolicy = policy, _label: str = label) -> None:
            captured[_label] = [p.grad.clone() for p in _policy.model.parameters()]

        policy.optimizer.step = capture  # type: ignore[method-assign]
    m1, m2 = whole.train(groups), chunked.train(groups)
    assert m1["loss"] == pytest.approx(m2["loss"], abs=1e-6)
    assert m1["grad_norm"] > 0
    for g1, g2 in zip(captured["whole"], captured["chunked"], strict=True):
        torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-7)


def test_cancel_stops_generate_and_train_until_reset(model_cache: Path) -> None:
    policy = TrainerPolicy(small_config(model_cache))
    ref = QuestionRef("basic_arithmetic", 3, 1)
    policy.cancel()
    with pytest.raises(Cancelled):
        policy.generate([ref])
    with pytest.raises(Cancelled):
        policy.train([QuestionGroup(ref, (Completion("a", 1.0), Completion("b", 0.0)))])
    policy.reset_cancel()
    assert len(policy.generate([ref])) == 1


def test_checkpoints_keep_last_k_and_fall_back_over_a_corrupt_one(model_cache: Path, tmp_path: Path) -> None:
    import shutil

    data = tmp_path / "data"
    shutil.copytree(model_cache / "models", data / "models")  # reuse the built tiny model
    config = small_config(data, checkpoint_keep=2)
    policy = TrainerPolicy(config)
    # a training question (a held-out one would be dropped before the update)
    ref = next(
        r
        for r in (QuestionRef("basic_arithmetic", 3, i) for i in range(100))
        if not policy.registry.is_heldout(r)
    )
    group = QuestionGroup(ref, (Completion("<answer>1</answer>", 1.0), Completion("x", 0.0)))
    for _ in range(3):
        policy.train([group])
        policy.save()
    steps = [step for step, _path in checkpoint.list_checkpoints(config.checkpoint_dir)]
    assert steps == [2, 3]
    for path in config.checkpoint_dir.iterdir():
        assert path.stat().st_mode & 0o777 == 0o600

    newest = checkpoint.checkpoint_path(config.checkpoint_dir, 3)
    blob = bytearray(newest.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    newest.write_bytes(bytes(blob))
    messages: list[str] = []
    resumed = TrainerPolicy(config, log=messages.append)
    assert resumed.load() is True
    assert resumed.step == 2
    assert any("corrupt" in m and "step-000000003" in m for m in messages)

    (config.checkpoint_dir / "step-000000002.ckpt").write_bytes(b"garbage")
    assert TrainerPolicy(config, log=messages.append).load() is False


def test_evaluate_reports_per_task_reward_and_accuracy(model_cache: Path) -> None:
    policy = TrainerPolicy(small_config(model_cache, eval_questions=2))
    result = policy.evaluate()
    assert set(result["per_task"]) == set(TASKS)
    for values in result["per_task"].values():
        assert 0.0 <= values["reward"] <= 1.0 and 0.0 <= values["accuracy"] <= 1.0
    assert result["samples"] and all(s["index"] >= 10_000_000 for s in result["samples"])
    assert (model_cache / "eval.jsonl").read_text().count("\n") >= 1


@pytest.mark.parametrize("stop_at_answer", [True, False])
def test_completions_end_at_the_answers_closing_tag(model_cache: Path, stop_at_answer: bool) -> None:
    policy = TrainerPolicy(small_config(model_cache, stop_at_answer=stop_at_answer))
    tokenizer = policy.tokenizer
    script = [tokenizer.convert_tokens_to_ids(t) for t in ("<answer>", "</answer>")]
    script.insert(1, tokenizer("7", add_special_tokens=False)["input_ids"][0])
    filler = tokenizer("x", add_special_tokens=False)["input_ids"][0]
    calls = 0

    def write_an_answer_then_go_on(module: object, inputs: object, output: object) -> None:
        # The model's forward, overridden in its logits: "<answer>7</answer>" then "x" forever.
        nonlocal calls
        token = script[calls] if calls < len(script) else filler
        calls += 1
        logits = output.logits  # type: ignore[attr-defined]
        logits[:, -1, :] = -1e9
        logits[:, -1, token] = 0.0

    policy.model.register_forward_hook(write_an_answer_then_go_on)
    groups = policy.generate([QuestionRef("basic_arithmetic", 3, 1)])
    texts = {c.text for c in groups[0].completions}
    if stop_at_answer:
        assert texts == {"<answer>7</answer>"}
        question = groups[0].question
        ids = policy.completion_ids(question, "<answer>7</answer>")
        assert ids == [*script, tokenizer.eos_token_id]  # ended: EOS after the tag
    else:
        (text,) = texts
        assert text.startswith("<answer>7</answer>x") and text.count("x") == 16 - 3
