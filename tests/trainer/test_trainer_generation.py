"""trainer/generation.py's sampler: rows end at their first EOS, and dropping ended rows from the
batch (compaction) changes nothing about the rows still running; trainer/model.py's thread count."""

from __future__ import annotations

import itertools
import os

import pytest
import torch

import trainer.generation as generation
from trainer.config import TrainerConfig
from trainer.model import available_cores, configure_threads


def tiny_llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    return LlamaForCausalLM(config).eval()


PROMPTS = [[5, 6, 7, 8, 9], [11, 3], [20, 21, 22], [30, 1, 2, 3, 4, 5, 6]]
PAD = 0


def greedy(model: torch.nn.Module, eos_id: int, repeats: int = 1) -> list[list[int]]:
    return generation.sample(
        model, PROMPTS, repeats, 12, 0.0, eos_id=eos_id, pad_id=PAD, generator=torch.Generator()
    )


def cut_at(row: list[int], eos_id: int) -> list[int]:
    return row[: row.index(eos_id) + 1] if eos_id in row else row


@pytest.mark.parametrize("compact_when_ended", [1, 2, 8, 10**9])
def test_rows_end_at_their_first_eos_with_or_without_compaction(
    monkeypatch: pytest.MonkeyPatch, compact_when_ended: int
) -> None:
    model = tiny_llama()
    full = greedy(model, eos_id=-1)  # no row ever ends: the full greedy continuations
    assert all(len(row) == 12 for row in full)
    # An EOS that some rows produce early and others late or never: rows leave the batch at
    # different steps, and every other row must continue exactly as before.
    counts: dict[int, int] = {}
    for row in full:
        for token in set(row):
            counts[token] = counts.get(token, 0) + 1
    eos_id = min(counts, key=lambda token: (abs(counts[token] - len(full) / 2), token))
    monkeypatch.setattr(generation, "COMPACT_WHEN_ENDED", compact_when_ended)
    rows = greedy(model, eos_id)
    assert rows == [cut_at(row, eos_id) for row in full]
    assert any(row[-1] == eos_id for row in rows) and any(eos_id not in row for row in rows)


def test_sampled_rows_are_seeded_and_repeat_per_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_llama()
    monkeypatch.setattr(generation, "COMPACT_WHEN_ENDED", 1)

    def run(seed: int) -> list[list[int]]:
        return generation.sample(
            model, PROMPTS, 3, 10, 1.0, eos_id=7, pad_id=PAD, generator=torch.Generator().manual_seed(seed)
        )

    first = run(1)
    assert len(first) == 3 * len(PROMPTS)
    assert first == run(1)
    for row in first:
        assert 1 <= len(row) <= 10
        assert 7 not in row[:-1]  # nothing after the first EOS
        assert len(row) == 10 or row[-1] == 7


def test_threads_follow_the_cores_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0}, raising=False)
        assert available_cores() == 1
        configure_threads(TrainerConfig(threads=0))
        assert torch.get_num_threads() == 1
        configure_threads(TrainerConfig(threads=2))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_decoding_uses_the_models_current_cache_keyword_without_a_deprecation_warning() -> None:
    import warnings

    model = tiny_llama()
    with warnings.catch_warnings():
        # transformers 5.2x warns on every forward given `past_key_values=`: a node printed it
        # among its round lines; the keyword it asks for now is `cache`.
        warnings.simplefilter("error", FutureWarning)
        rows = greedy(model, eos_id=39)
    assert len(rows) == len(PROMPTS)
    assert generation.cache_keyword(type(model)) in ("cache", "past_key_values")

    class OldStyle(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor, past_key_values: object = None) -> None: ...

    assert generation.cache_keyword(OldStyle) == "past_key_values"


def token_text(token: int) -> str:
    return f"<{token}>"


def decode_marked(ids: list[int]) -> str:
    return "".join(token_text(token) for token in ids)


@pytest.mark.parametrize("compact_when_ended", [1, 8, 10**9])
def test_rows_end_at_the_first_stop_text_followed_by_eos(
    monkeypatch: pytest.MonkeyPatch, compact_when_ended: int
) -> None:
    model = tiny_llama()
    full = greedy(model, eos_id=-1)  # the full greedy continuations (12 tokens each)
    eos_id = min(set(range(40)) - {token for row in full for token in row})  # never sampled
    # A stop text of two tokens that some rows write, at different steps, and others never do.
    pairs: dict[tuple[int, int], int] = {}
    for row in full:
        for pair in set(itertools.pairwise(row)):
            pairs[pair] = pairs.get(pair, 0) + 1
    first, second = min(pairs, key=lambda pair: (abs(pairs[pair] - len(full) / 2), pair))
    stop = generation.StopAtText(token_text(first) + token_text(second), decode_marked, 40)
    monkeypatch.setattr(generation, "COMPACT_WHEN_ENDED", compact_when_ended)
    rows = generation.sample(
        model, PROMPTS, 1, 12, 0.0, eos_id=eos_id, pad_id=PAD, generator=torch.Generator(), stop=stop
    )

    def expected(row: list[int]) -> list[int]:
        for end in range(1, len(row)):
            if (row[end - 1], row[end]) == (first, second):
                kept = row[: end + 1]
                return [*kept, eos_id] if len(kept) < 12 else kept
        return row

    assert rows == [expected(row) for row in full]
    assert any(row[-1] == eos_id for row in rows) and any(len(row) == 12 for row in rows)


def test_only_tokens_that_can_complete_the_stop_text_are_checked() -> None:
    texts = {3: "ab>", 4: ">", 5: "x"}
    decoded: list[list[int]] = []

    def decode(ids: list[int]) -> str:
        decoded.append(list(ids))
        return "".join(texts.get(token, "") for token in ids)

    stop = generation.StopAtText("b>", decode, vocab_size=6)
    assert stop.may_end(torch.device("cpu"), 8).tolist() == [False] * 3 + [True, True] + [False] * 3
    assert stop.found([5, 3]) and not stop.found([5, 4]) and stop.found([3, 4])
    with pytest.raises(ValueError, match="empty"):
        generation.StopAtText("", decode, 6)
