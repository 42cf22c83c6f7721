"""Completion tokens per second on CPU: ours (trainer/generation.py) vs transformers' plain
`generate` vs TRL's GRPOTrainer generation, on the same model, prompts, G and length, in one run.

Models:
- tiny: the cached tiny model `swarmp2p node` uses (built offline on first use), prompts from
  the node's default tasks (the text a node generates for).
- 0.5b: a Qwen2-0.5B-shaped config (hidden 896, 24 layers, 14 heads / 2 KV heads, vocab 151,936)
  with random weights (no hub download), prompts of random token ids.

Methods, all sampling at temperature 1 with a KV cache, G completions per prompt:
- ours: trainer.generation.sample (each prompt prefilled once, its cache repeated G times).
- ours+stop (tiny): the same, ending each completion at its first `</answer>` with EOS after it,
  as the node generates (TrainerConfig.stop_at_answer). Its completions are the same text when
  the model writes EOS right after the tag (one decoding step fewer each); compare its seconds.
- generate: `model.generate(do_sample=True, num_return_sequences=G)` with the model's default
  generation settings (transformers' defaults: top_k 50).
- trl: what GRPOTrainer does without vLLM: every prompt repeated G times in the batch and
  `model.generate` with the GenerationConfig it builds from GRPOConfig's defaults
  (top_k 0, top_p 1, no repetition penalty, `disable_compile=True`).

A completion's tokens are counted up to and including its first EOS (padding after it is not
work anyone wanted). Each method runs `--repeats` times after one warm-up, interleaved so load
noise hits all alike; the median is reported, with ratios to ours: per wall second, and per
CPU second of this process (all torch threads; steadier than wall time on a loaded machine).

    python bench/bench_generation.py                          # tiny and 0.5b
    python bench/bench_generation.py --models tiny --repeats 5 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

QWEN2_05B = dict(
    vocab_size=151_936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32_768,
    rope_theta=1_000_000.0,
    tie_word_embeddings=True,
)


def completion_lengths(rows: Sequence[Sequence[int]], eos_id: int) -> list[int]:
    """Tokens per completion up to and including the first EOS."""
    lengths = []
    for row in rows:
        row = list(row)
        lengths.append(row.index(eos_id) + 1 if eos_id in row else len(row))
    return lengths


def tiny_setup(prompts_n: int) -> tuple[Any, list[list[int]], int, int, str, Any]:
    from protocol.messages import QuestionRef
    from trainer.config import TrainerConfig, user_model_cache
    from trainer.generation import StopAtText
    from trainer.model import load_model_and_tokenizer
    from trainer.rewards import ANSWER_CLOSE
    from trainer.tasks import ReasoningGymRegistry

    config = TrainerConfig(model_cache=user_model_cache())
    model, tokenizer = load_model_and_tokenizer(config, "cpu")
    registry = ReasoningGymRegistry(config.tasks, config.weights, config.difficulty, config.format_reward)
    prompts = []
    for i in range(prompts_n):
        text, _answer = registry.question(QuestionRef(config.tasks[i % len(config.tasks)], 7, i))
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][-config.max_prompt_tokens :]
        prompts.append(list(ids))
    params = sum(p.numel() for p in model.parameters())
    stop = StopAtText.for_tokenizer(tokenizer, ANSWER_CLOSE)
    return model, prompts, tokenizer.eos_token_id, tokenizer.pad_token_id, f"tiny ({params / 1e6:.1f}M)", stop


def qwen_setup(prompts_n: int, prompt_len: int) -> tuple[Any, list[list[int]], int, int, str, Any]:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(**QWEN2_05B, bos_token_id=151_643, eos_token_id=151_643, pad_token_id=151_643)
    model = Qwen2ForCausalLM(config).eval()
    model.config.use_cache = True
    generator = torch.Generator().manual_seed(1)
    prompts = [
        torch.randint(0, 150_000, (prompt_len,), generator=generator).tolist() for _ in range(prompts_n)
    ]
    params = sum(p.numel() for p in model.parameters())
    return model, prompts, 151_643, 151_643, f"0.5b-shaped ({params / 1e6:.0f}M, random)", None


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


def methods(
    model: Any, prompts: list[list[int]], g: int, tokens: int, eos_id: int, pad_id: int, stop: Any = None
) -> dict[str, Callable[[int], list[list[int]]]]:
    import torch
    from transformers import GenerationConfig

    from trainer.generation import sample

    def ours(seed: int) -> list[list[int]]:
        generator = torch.Generator().manual_seed(seed)
        return sample(model, prompts, g, tokens, 1.0, eos_id, pad_id, generator)

    def ours_stop(seed: int) -> list[list[int]]:
        generator = torch.Generator().manual_seed(seed)
        return sample(model, prompts, g, tokens, 1.0, eos_id, pad_id, generator, stop=stop)

    ids, mask = left_pad(prompts, pad_id)

    def plain(seed: int) -> list[list[int]]:
        torch.manual_seed(seed)
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                max_new_tokens=tokens,
                num_return_sequences=g,
                pad_token_id=pad_id,
                eos_token_id=eos_id,
            )
        return out[:, ids.size(1) :].tolist()

    # GRPOTrainer (no vLLM): prompts repeated G times, GenerationConfig from GRPOConfig defaults.
    from trl import GRPOConfig

    trl_args = GRPOConfig(output_dir="/tmp/bench-generation-trl", report_to=[], use_cpu=True, bf16=False)
    trl_config = GenerationConfig(
        max_new_tokens=tokens,
        do_sample=True,
        pad_token_id=pad_id,
        eos_token_id=[eos_id],
        temperature=trl_args.temperature,
        top_p=trl_args.top_p,
        top_k=trl_args.top_k,
        min_p=trl_args.min_p,
        repetition_penalty=trl_args.repetition_penalty,
        cache_implementation=trl_args.cache_implementation,
        disable_compile=True,
    )
    repeated = [p for p in prompts for _ in range(g)]
    trl_ids, trl_mask = left_pad(repeated, pad_id)

    def trl(seed: int) -> list[list[int]]:
        torch.manual_seed(seed)
        with torch.no_grad():
            out = model.generate(input_ids=trl_ids, attention_mask=trl_mask, generation_config=trl_config)
        return out[:, trl_ids.size(1) :].tolist()

    runs = {"ours": ours, "ours+stop": ours_stop, "generate": plain, "trl": trl}
    if stop is None:
        del runs["ours+stop"]
    return runs


def measure(
    name: str, setup: tuple[Any, list[list[int]], int, int, str, Any], g: int, tokens: int, repeats: int
) -> list[dict[str, Any]]:
    model, prompts, eos_id, pad_id, label, stop = setup
    runs = methods(model, prompts, g, tokens, eos_id, pad_id, stop)
    times: dict[str, list[float]] = {method: [] for method in runs}
    cpu: dict[str, list[float]] = {method: [] for method in runs}
    counts: dict[str, list[int]] = {method: [] for method in runs}
    for repeat in range(repeats + 1):  # the first pass warms allocators and caches up
        for method, run in runs.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            rows = run(1000 + repeat)
            seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - started_cpu
            assert len(rows) == len(prompts) * g, (method, len(rows))
            if repeat:
                times[method].append(seconds)
                cpu[method].append(cpu_seconds)
                counts[method].append(sum(completion_lengths(rows, eos_id)))
    results = []
    for method in runs:
        rates = [n / s for n, s in zip(counts[method], times[method], strict=True)]
        cpu_rates = [n / s for n, s in zip(counts[method], cpu[method], strict=True)]
        results.append(
            {
                "model": label,
                "method": method,
                "prompts": len(prompts),
                "g": g,
                "max_tokens": tokens,
                "seconds": statistics.median(times[method]),
                "tokens": statistics.median(counts[method]),
                "tokens_per_s": statistics.median(rates),
                "tokens_per_cpu_s": statistics.median(cpu_rates),
            }
        )
    ours = next(r for r in results if r["method"] == "ours")
    for result in results:
        result["vs_ours"] = result["tokens_per_s"] / ours["tokens_per_s"]
        result["cpu_vs_ours"] = result["tokens_per_cpu_s"] / ours["tokens_per_cpu_s"]
        result["seconds_vs_ours"] = result["seconds"] / ours["seconds"]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,0.5b", help="comma-separated: tiny, 0.5b")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = cores available)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny-prompts", type=int, default=4)
    parser.add_argument("--tiny-g", type=int, default=8)
    parser.add_argument("--tiny-tokens", type=int, default=48)
    parser.add_argument("--big-prompts", type=int, default=2)
    parser.add_argument("--big-g", type=int, default=4)
    parser.add_argument("--big-tokens", type=int, default=16)
    parser.add_argument("--big-prompt-len", type=int, default=64)
    parser.add_argument("--json", default="", help="also write the rows to this file")
    args = parser.parse_args()

    import torch

    from trainer.model import available_cores

    threads = args.threads or available_cores()
    torch.set_num_threads(threads)
    rows: list[dict[str, Any]] = []
    for name in args.models.split(","):
        if name == "tiny":
            setup = tiny_setup(args.tiny_prompts)
            rows += measure(name, setup, args.tiny_g, args.tiny_tokens, args.repeats)
        elif name in ("0.5b", "qwen"):
            setup = qwen_setup(args.big_prompts, args.big_prompt_len)
            rows += measure(name, setup, args.big_g, args.big_tokens, args.repeats)
        else:
            raise SystemExit(f"unknown model {name!r}")
        del setup
    print(
        f"generation on CPU: completion tokens/s (median of {args.repeats}; torch threads {threads}; "
        f"load {os.getloadavg()[0]:.2f})"
    )
    header = (
        f"{'model':<28} {'method':<9} {'prompts x G x max':>17} {'tokens':>7} {'s':>7} {'s x ours':>8} "
        f"{'tok/s':>8} {'x ours':>7} {'tok/CPU-s':>10} {'x ours':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        shape = f"{r['prompts']} x {r['g']} x {r['max_tokens']}"
        print(
            f"{r['model']:<28} {r['method']:<9} {shape:>17} {r['tokens']:>7.0f} {r['seconds']:>7.2f} "
            f"{r['seconds_vs_ours']:>8.2f} "
            f"{r['tokens_per_s']:>8.1f} {r['vs_ours']:>7.2f} "
            f"{r['tokens_per_cpu_s']:>10.1f} {r['cpu_vs_ours']:>7.2f}"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
