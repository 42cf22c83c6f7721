"""pass@1 and pass@k of a model on a held-out split: how much a model could gain by RL.

    python scripts/pass_at_k.py                                    # the default base, test split
    python scripts/pass_at_k.py --model runs/learning/seed-1/out/best-model --split test

For each held-out question of the split (the fixed set `swarmp2p train` evaluates), k completions
are sampled at each of two settings: the evaluation's (temperature 0.6, top-p 0.95) and plain
sampling (temperature 1). pass@1 is the mean correctness of one completion (over the k), pass@k
the share of questions with at least one right answer among the k. RL sharpens what a model can
already sample: it can lift pass@1 toward pass@k, rarely past it. Every figure carries a 95%
bootstrap interval over questions (trainer/intervals.py).
"""

from __future__ import annotations

import argparse
import json

import attrs
import torch

from trainer.config import TrainerConfig, user_model_cache
from trainer.evaluation import CORRECT, correctness
from trainer.intervals import mean_interval
from trainer.policy import TrainerPolicy

SETTINGS = (("eval sampling (t 0.6, top-p 0.95)", 0.6, 0.95), ("plain sampling (t 1.0)", 1.0, 1.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny (the default base), a folder or an HF id")
    parser.add_argument("--split", default="test", choices=("test", "validation"))
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1, help="the sampler's seed")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args()
    scratch = "/tmp/swarmp2p-pass-at-k"  # no checkpoints are written: nothing here trains
    config = TrainerConfig(model=args.model, model_cache=user_model_cache(), data_dir=scratch)
    policy = TrainerPolicy(config)
    refs = policy.registry.eval_questions(config.eval_questions, config.eval_seed, args.split)
    results = {}
    for name, temperature, top_p in SETTINGS:
        generator = torch.Generator().manual_seed(args.seed)
        texts: list[str] = []
        for start in range(0, len(refs), 8):
            rows = policy._sample_ids(refs[start : start + 8], args.k, temperature, generator, top_p=top_p)
            texts.extend(policy.tokenizer.decode(ids, skip_special_tokens=True) for ids in rows)
        for task in [*policy.registry.task_names(), "all"]:
            right = [
                [correctness(policy.registry, ref, texts[i * args.k + j]) >= CORRECT for j in range(args.k)]
                for i, ref in enumerate(refs)
                if task in ("all", ref.task)
            ]
            results.setdefault(task, {})[name] = {
                "pass@1": attrs.asdict(mean_interval([sum(r) / args.k for r in right])),
                f"pass@{args.k}": attrs.asdict(mean_interval([float(any(r)) for r in right])),
                "questions": len(right),
            }
    if args.json:
        print(json.dumps({"model": args.model, "split": args.split, "k": args.k, "results": results}))
        return
    print(f"{args.model} on the {args.split} split ({len(refs)} questions), k = {args.k}, 95% intervals")
    print(f"| task | sampling | pass@1 | pass@{args.k} |")
    print("|---|---|---|---|")
    for task, by_setting in results.items():
        for name, figures in by_setting.items():
            one, many = figures["pass@1"], figures[f"pass@{args.k}"]
            print(
                f"| {task} ({figures['questions']} q) | {name} | {one['mean']:.3f} [{one['low']:.3f}, "
                f"{one['high']:.3f}] | {many['mean']:.3f} [{many['low']:.3f}, {many['high']:.3f}] |"
            )


if __name__ == "__main__":
    main()
