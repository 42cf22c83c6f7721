"""Seconds per GRPO step and completion tokens per second: our trainer vs TRL's GRPOTrainer.

Both run in this process on the same tiny model (same weights), the same questions (prompt
text), the same G, completion length, temperature, loss (token-level, clip 0.2 / 0.28, beta 0)
and threads. A step is generate + score + one update. The first `--skip` steps of each are
excluded (allocator and cache warm-up). Printed as a rich table with ratios ours / TRL.

    python bench/bench_trainer.py [--steps 8] [--questions 4] [--generations 4] [--tokens 48]
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--skip", type=int, default=2)
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()

    import torch
    from rich.console import Console
    from rich.table import Table

    from trainer.config import TrainerConfig
    from trainer.policy import TrainerPolicy

    console = Console()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    config = TrainerConfig(
        data_dir=str(data_dir),
        tasks=("basic_arithmetic", "calendar_arithmetic"),
        tiny_hidden_size=args.hidden,
        tiny_pretrain_steps=0,  # step speed does not depend on the weights
        tiny_layers=args.layers,
        threads=args.threads,
        num_generations=args.generations,
        max_new_tokens=args.tokens,
        temperature=1.0,
        lr=1e-4,
        format_reward=0.5,
        seed=0,
    )
    policy = TrainerPolicy(config)
    initial_weights = copy.deepcopy(policy.model.state_dict())
    rng = random.Random(0)
    total_steps = args.steps + args.skip
    questions = [policy.registry.sample(rng, args.questions, config.seed) for _ in range(total_steps)]
    console.print(
        f"model: tiny {sum(p.numel() for p in policy.model.parameters()) / 1e6:.2f}M params, "
        f"{torch.get_num_threads()} threads; batch {args.questions} questions x G={args.generations}, "
        f"{args.tokens} new tokens max; {args.steps} timed steps after {args.skip} warm-up steps"
    )

    # --- ours ---
    ours_times, ours_tokens = [], []
    for step in range(total_steps):
        started = time.perf_counter()
        groups = policy.generate(questions[step])
        policy.train(groups)
        elapsed = time.perf_counter() - started
        tokens = sum(len(policy.completion_ids(g.question, c.text)) for g in groups for c in g.completions)
        if step >= args.skip:
            ours_times.append(elapsed)
            ours_tokens.append(tokens)

    # --- TRL, same starting weights ---
    trl_times, trl_tokens = run_trl(policy, initial_weights, questions, args, data_dir, config)

    table = Table(title="GRPO step: ours vs TRL GRPOTrainer (same model, batch, lengths)")
    for column in ("trainer", "s/step (median)", "s/step (mean)", "completion tok/s", "time ratio vs TRL"):
        table.add_column(column, justify="right")
    trl_median = statistics.median(trl_times)
    for name, times, tokens in (
        ("TRL GRPOTrainer", trl_times, trl_tokens),
        ("swarmp2p", ours_times, ours_tokens),
    ):
        median = statistics.median(times)
        table.add_row(
            name,
            f"{median:.3f}",
            f"{statistics.mean(times):.3f}",
            f"{sum(tokens) / sum(times):.0f}",
            f"{median / trl_median:.2f}x",
        )
    console.print(table)
    ratio = statistics.median(ours_times) / trl_median
    verdict = "meets" if ratio <= 0.8 else "MISSES"
    console.print(f"ours / TRL time per step = {ratio:.2f}x ({verdict} the <= 0.8x target)")


def run_trl(
    policy, initial_weights, questions, args, data_dir: Path, config
) -> tuple[list[float], list[int]]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.model import model_folder

    model = AutoModelForCausalLM.from_pretrained(model_folder(config), dtype=torch.float32)
    model.load_state_dict(initial_weights)
    registry = policy.registry
    flat = [ref for step in questions for ref in step]
    prompts = [registry.question(ref)[0] for ref in flat]
    by_prompt = {registry.question(ref)[0]: ref for ref in flat}
    token_counts: list[int] = []

    def reward(prompts, completions, completion_ids, **_kwargs):
        token_counts.append(sum(len(ids) for ids in completion_ids))
        return [registry.score(by_prompt[p], c) for p, c in zip(prompts, completions, strict=True)]

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._started = 0.0

        def on_step_begin(self, *_args, **_kwargs):
            self._started = time.perf_counter()

        def on_step_end(self, *_args, **_kwargs):
            self.times.append(time.perf_counter() - self._started)

    timer = StepTimer()
    batch = args.questions * args.generations
    trl_args = GRPOConfig(
        output_dir=str(data_dir / "trl"),
        per_device_train_batch_size=batch,
        num_generations=args.generations,
        max_completion_length=args.tokens,
        temperature=1.0,
        learning_rate=1e-4,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        max_steps=len(questions),
        bf16=False,
        use_cpu=True,
        report_to=[],
        logging_steps=10_000,
        save_strategy="no",
        shuffle_dataset=False,
        seed=0,
        disable_tqdm=True,
    )
    # TRL repeats each prompt G times itself: give it each question once, in step order
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=trl_args,
        processing_class=policy.tokenizer,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        callbacks=[timer],
    )
    trainer.train()
    return timer.times[args.skip :], token_counts[args.skip :]


if __name__ == "__main__":
    main()
