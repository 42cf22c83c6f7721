"""Held-out learning curve of `swarmp2p train` over several seeds: mean and spread, one PNG.

    python scripts/learning_curve.py --seeds 1,2,3 --steps 300 --out runs/learning
    python scripts/learning_curve.py --seeds 1,2,3 --out runs/learning --reuse   # summary of finished runs

The curve is the `validation` split, which `swarmp2p train` evaluates every `--eval-every` steps
and keeps the best weights of; the reported result is the `test` split, which each run evaluates
twice: on the start and on the weights its validation curve chose (trainer/selection.py). No
choice sees a test question. `--split test` instead draws the curve on test, with no selection.

Runs `swarmp2p train --seed S --fresh` once per seed, each in its own data dir, at most `--jobs`
at a time (one torch thread each), all from ONE pre-built tiny model (built here first into the
user's model cache; the base does not depend on `--seed`, so the seeds differ only in GRPO's
sampling and question draws).
Reads each run's metrics.jsonl and writes OUT/curve.png and OUT/summary.json: held-out accuracy
(correct answers over all held-out questions) per evaluation step, mean and min-max over seeds,
and the gain from step 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from trainer.intervals import Interval, grid_interval


def run_seed(seed: int, args: argparse.Namespace, base: Path) -> subprocess.Popen:
    data = args.out / f"seed-{seed}"
    if data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True)
    command = [
        sys.executable, "-m", "swarmp2p.cli", "train", "--seed", str(seed), "--fresh",
        "--steps", str(args.steps), "--eval-every", str(args.eval_every), "--threads", "1",
        "--eval-split", args.split, "--data-dir", str(data), "--out", str(data / "out"), *args.extra,
    ]  # fmt: skip
    log = open(data / "train.log", "w")  # the child holds it; closed at exit
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


def records_of(folder: Path, key: str) -> list[dict]:
    lines = (folder / "out" / "metrics.jsonl").read_text().splitlines()
    return [record[key] for record in map(json.loads, lines) if key in record]


def evals_of(folder: Path) -> list[dict]:
    return records_of(folder, "eval")


def selection_of(folder: Path) -> dict | None:
    """The run's test figures: start, selected weights, the step chosen; None without selection."""
    starts, selected = records_of(folder, "test_start"), records_of(folder, "test_selected")
    if not starts or not selected:
        return None
    return {
        "test_start": starts[-1]["accuracy"],
        "test_selected": selected[-1]["accuracy"],
        "gain": selected[-1]["accuracy"] - starts[-1]["accuracy"],
        # The mean over tasks (what "overall" meant before it weighed every question alike).
        "task_mean_gain": task_mean(selected[-1]) - task_mean(starts[-1]),
        "selected_step": selected[-1]["selected_step"],
        "validation_accuracy": selected[-1]["validation_accuracy"],
        "test_per_task_start": {t: v["accuracy"] for t, v in starts[-1]["per_task"].items()},
        "test_per_task_selected": {t: v["accuracy"] for t, v in selected[-1]["per_task"].items()},
        "test_questions": selected[-1]["questions"],
        # per question (the set's fixed order): what the intervals over questions and seeds pair on
        "per_question_gain": [
            after - before
            for before, after in zip(starts[-1]["per_question"], selected[-1]["per_question"], strict=True)
        ],
    }


def task_mean(result: dict) -> float:
    accuracies = [v["accuracy"] for v in result["per_task"].values()]
    return sum(accuracies) / len(accuracies)


def finished(folder: Path, steps: int) -> bool:
    try:
        return any(e["step"] >= steps for e in evals_of(folder))
    except (OSError, ValueError):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--split", choices=("test", "validation"), default="validation",
        help="the curve's split (validation: with selection and a test report; test: the curve only)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("runs/learning"))
    parser.add_argument("--reuse", action="store_true", help="keep the runs of seeds already finished")
    parser.add_argument(
        "--report-samples", type=int, default=16,
        help="completions per test question when the base and each run's chosen weights are evaluated "
             "again for the reported figure (0: keep the runs' own test evaluations)",
    )  # fmt: skip
    parser.add_argument("extra", nargs="*", help="more `swarmp2p train` flags, after --")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)

    base = args.out / "base"
    started = time.time()
    print("building the tiny model once ...", flush=True)
    subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", "train", "--steps", "1", "--eval-every", "0", "--threads", "0",
         "--data-dir", str(base), "--out", str(base / "out"), "--fresh", *args.extra],
        check=True, capture_output=True,
    )  # fmt: skip
    print(f"built in {time.time() - started:.0f} s", flush=True)
    pending, running = list(seeds), []
    if args.reuse:
        pending = [s for s in seeds if not finished(args.out / f"seed-{s}", args.steps)]
    while pending or running:
        while pending and len(running) < args.jobs:
            seed = pending.pop(0)
            running.append((seed, time.time(), run_seed(seed, args, base)))
        time.sleep(2)
        for item in list(running):
            seed, began, process = item
            if process.poll() is not None:
                running.remove(item)
                status = "ok" if process.returncode == 0 else f"FAILED ({process.returncode})"
                print(f"seed {seed}: {status} in {time.time() - began:.0f} s", flush=True)

    curves = {seed: evals_of(args.out / f"seed-{seed}") for seed in seeds}
    # By step, over the steps every run evaluated: a run misses its last evaluation when one of
    # its updates was skipped (every group of zero advantage: `--steps` counts iterations).
    by_step = {s: {e["step"]: e for e in curves[s]} for s in seeds}
    steps = sorted(set.intersection(*(set(evals) for evals in by_step.values())))
    table = []
    for step in steps:
        values = [by_step[s][step]["accuracy"] for s in seeds]
        table.append({"step": step, "mean": statistics.mean(values), "min": min(values), "max": max(values)})
    gains = [curves[s][-1]["accuracy"] - curves[s][0]["accuracy"] for s in seeds]
    # every seed evaluates the same questions: a two-way bootstrap over seeds and questions
    curve_gain = grid_interval(
        [
            [b - a for a, b in zip(curves[s][0]["per_question"], curves[s][-1]["per_question"], strict=True)]
            for s in seeds
        ]
    )
    per_task_first = {t: statistics.mean(curves[s][0]["per_task"][t]["accuracy"] for s in seeds)
                      for t in curves[seeds[0]][0]["per_task"]}  # fmt: skip
    per_task_last = {t: statistics.mean(curves[s][-1]["per_task"][t]["accuracy"] for s in seeds)
                     for t in per_task_first}  # fmt: skip
    summary = {
        "seeds": seeds, "steps": args.steps, "split": args.split, "extra_flags": args.extra, "curve": table,
        "gain_per_seed": gains, "gain_mean": statistics.mean(gains), "gain_interval": curve_gain.as_dict(),
        "per_task_first": per_task_first, "per_task_last": per_task_last,
        "questions": sum(t["n"] for t in curves[seeds[0]][0]["per_task"].values()),
        "wall_s": time.time() - started,
    }  # fmt: skip
    selections = {seed: selection_of(args.out / f"seed-{seed}") for seed in seeds}
    if all(selections.values()):
        test_gains = [selections[s]["gain"] for s in seeds]
        summary["test"] = {
            "per_seed": {str(s): selections[s] for s in seeds},
            "gain_mean": statistics.mean(test_gains),
            "gain_interval": grid_interval([selections[s]["per_question_gain"] for s in seeds]).as_dict(),
            "gain_min": min(test_gains),
            "gain_max": max(test_gains),
            "start_mean": statistics.mean(selections[s]["test_start"] for s in seeds),
            "selected_mean": statistics.mean(selections[s]["test_selected"] for s in seeds),
        }
        if args.report_samples and not args.extra:
            summary["test"]["report"] = report_test(args, seeds)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(args.out / "curve.png", table, curves, seeds, args.split, selections)
    per_seed = ", ".join(f"{g:+.3f}" for g in gains)
    print(f"held-out ({args.split}) accuracy step 0 -> {steps[-1]}: "
          f"{table[0]['mean']:.3f} -> {table[-1]['mean']:.3f}, gain {curve_gain.text()} (95% interval over "
          f"seeds and questions; per seed {per_seed})")  # fmt: skip
    if "test" in summary:
        test = summary["test"]
        chosen = ", ".join(
            f"seed {s}: {selections[s]['test_start']:.3f} -> {selections[s]['test_selected']:.3f} "
            f"(step {selections[s]['selected_step']})" for s in seeds
        )  # fmt: skip
        print(f"test accuracy at the validation-chosen weights: {test['start_mean']:.3f} -> "
              f"{test['selected_mean']:.3f}, gain {Interval(**test['gain_interval']).text()} "
              f"(95% interval over seeds and questions; min {test['gain_min']:+.3f}, "
              f"max {test['gain_max']:+.3f}); {chosen}")  # fmt: skip
        report = test.get("report")
        if report:
            print(f"test accuracy with {report['samples']} completions per question (the reported figure): "
                  f"{report['start']:.3f} -> {report['selected_mean']:.3f}, gain "
                  f"{Interval(**report['gain_interval']).text()} (95% interval over seeds and questions; "
                  f"per seed {', '.join(f'{g:+.3f}' for g in report['gain_per_seed'])})")  # fmt: skip
    print(f"{args.out / 'curve.png'}, {args.out / 'summary.json'}")


def report_test(args: argparse.Namespace, seeds: list[int]) -> dict:
    """The base and every run's validation-chosen weights (OUT/seed-S/out/best-model) evaluated on
    the test split again with `--report-samples` completions per question (the runs evaluate 4): the
    same questions and sampler for all, so the gains pair by question and seed."""
    from trainer.config import TrainerConfig, user_model_cache
    from trainer.policy import TrainerPolicy

    def per_question(model: str) -> list[float]:
        config = TrainerConfig(
            model=model, model_cache=user_model_cache(), data_dir=str(args.out / "report"),
            eval_split="test", eval_samples=args.report_samples, threads=0,
        )  # fmt: skip
        return TrainerPolicy(config).evaluate()["per_question"]

    start = per_question("tiny")
    chosen = {s: per_question(str(args.out / f"seed-{s}" / "out" / "best-model")) for s in seeds}
    gains = [[b - a for a, b in zip(start, chosen[s], strict=True)] for s in seeds]
    return {
        "samples": args.report_samples,
        "start": statistics.mean(start),
        "selected_per_seed": [statistics.mean(chosen[s]) for s in seeds],
        "selected_mean": statistics.mean(statistics.mean(chosen[s]) for s in seeds),
        "gain_per_seed": [statistics.mean(g) for g in gains],
        "gain_interval": grid_interval(gains).as_dict(),
        "start_per_question": start,
    }


def plot(
    path: Path,
    table: list[dict],
    curves: dict[int, list[dict]],
    seeds: list[int],
    split: str,
    selections: dict[int, dict | None],
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4))
    x = [row["step"] for row in table]
    for seed in seeds:
        axis.plot(x, [e["accuracy"] for e in curves[seed]], color="tab:blue", alpha=0.25, lw=1)
    axis.fill_between(x, [r["min"] for r in table], [r["max"] for r in table], color="tab:blue", alpha=0.15,
                      label=f"min-max over {len(seeds)} seeds")  # fmt: skip
    axis.plot(x, [r["mean"] for r in table], "o-", color="tab:blue", lw=2, label=f"{split}: mean over seeds")
    chosen = [(seed, selection) for seed, selection in selections.items() if selection]
    if chosen:  # the reported figures: test on the start and on each run's chosen weights
        axis.scatter([0] * len(chosen), [c["test_start"] for _, c in chosen], marker="s", color="tab:red",
                     zorder=3, label="test: start")  # fmt: skip
        axis.scatter([c["selected_step"] for _, c in chosen], [c["test_selected"] for _, c in chosen],
                     marker="*", s=120, color="tab:red", zorder=3,
                     label="test: weights chosen on validation")  # fmt: skip
    axis.set_xlabel("GRPO step (swarmp2p train, defaults)")
    axis.set_ylabel("held-out accuracy")
    points = [r["min"] for r in table] + [r["max"] for r in table]
    points += [c[key] for _, c in chosen for key in ("test_start", "test_selected")]
    low, top = min(points), max(points)
    axis.set_ylim(max(0.0, low - 0.05), min(1.0, top + 0.05))  # fit the data: a 0-1 axis hid the change
    axis.set_title(f"held-out accuracy over {len(seeds)} seeds, one base model", fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


if __name__ == "__main__":
    main()
