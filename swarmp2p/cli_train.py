"""`swarmp2p train`: single-peer GRPO training with no network, a progress bar and a reward plot."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command(name="train")(train)


def train(
    model: str = typer.Option(
        None, "--model", help='"tiny" (built offline), a Hugging Face id, or a folder.'
    ),
    steps: int = typer.Option(50, "--steps", min=1, help="GRPO updates to run."),
    questions: int = typer.Option(8, "--questions", min=1, help="Questions per step (G completions each)."),
    warmup_steps: int = typer.Option(
        -1,
        "--warmup-steps",
        help="Supervised format warm-up steps before GRPO (-1: 15 for tiny, 0 otherwise).",
    ),
    data_dir: Path = typer.Option(
        None, "--data-dir", help="Checkpoints and model cache (default .swarmp2p)."
    ),
    out: Path = typer.Option(
        Path("runs/train"), "--out", help="Output folder: reward_curve.png, metrics.jsonl."
    ),
    config_file: Path = typer.Option(None, "--config", help="TOML file with a \\[trainer] section."),
    device: str = typer.Option(None, "--device", help="auto, cpu, cuda or mps."),
    tasks: str = typer.Option(None, "--tasks", help="Comma-separated reasoning-gym tasks."),
    format_reward: float = typer.Option(
        None, "--format-reward", help="Weight of the format reward in [0, 1]."
    ),
    eval_every: int = typer.Option(
        None, "--eval-every", help="Held-out evaluation every K steps (0: never)."
    ),
    seed: int = typer.Option(None, "--seed"),
    resume: bool = typer.Option(True, "--resume/--fresh", help="Continue from the newest checkpoint."),
    save_every: int = typer.Option(10, "--save-every", min=1, help="Checkpoint every N steps."),
) -> None:
    """Train one peer alone on the reasoning-gym task mix and plot its reward curve."""
    import json
    import random

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from swarmp2p.config import config_or_exit
    from trainer.config import TrainerConfig
    from trainer.evaluation import eval_due
    from trainer.model import ModelLoadError
    from trainer.plot import plot_rewards
    from trainer.tasks import TaskError

    console = Console(stderr=True, soft_wrap=True)  # errors stay one line whatever the width
    overrides = {
        "model": model,
        "data_dir": None if data_dir is None else str(data_dir),
        "device": device,
        "tasks": tasks,
        "format_reward": format_reward,
        "eval_every": eval_every,
        "seed": seed,
    }
    config = config_or_exit(TrainerConfig, section="trainer", file=config_file, overrides=overrides)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        console.print(f"[red]cannot create output folder {escape(str(out))}: {escape(str(error))}[/red]")
        raise typer.Exit(2) from None

    with console.status(f"loading model {config.model!r} (tiny builds offline on first use)..."):
        from trainer.policy import TrainerPolicy

        try:
            policy = TrainerPolicy(config, log=lambda message: console.print(f"[dim]{escape(message)}[/dim]"))
        except (ModelLoadError, TaskError) as error:
            console.print(f"[red]{escape(str(error))}[/red]")
            raise typer.Exit(2) from None
    params = sum(p.numel() for p in policy.model.parameters())
    console.print(f"model {config.model!r}: {params / 1e6:.2f}M params on {policy.device}")

    resumed = resume and policy.load()
    if not resumed:
        warmup = warmup_steps if warmup_steps >= 0 else (15 if config.model == "tiny" else 0)
        if warmup:
            losses = policy.warmup(warmup)
            console.print(f"format warm-up: {warmup} steps, loss {losses[0]:.2f} -> {losses[-1]:.2f}")
    evals: list[tuple[int, float]] = []
    last_eval_at: int | None = None

    def maybe_evaluate() -> None:
        nonlocal last_eval_at
        if eval_due(config, policy.step, last_eval_at):
            result = policy.evaluate()
            last_eval_at = policy.step
            evals.append((policy.step, result["accuracy"]))

    maybe_evaluate()

    rng = random.Random(config.seed * 1_000_003 + policy.step)
    rewards: list[float] = []
    start_step = policy.step
    with (
        open(out / "metrics.jsonl", "a", encoding="utf-8") as log,
        Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=console,
        ) as progress,
    ):
        bar = progress.add_task("train", total=steps, status="")
        for _ in range(steps):
            groups = policy.generate(policy.registry.sample(rng, questions, config.seed))
            metrics = policy.train(groups)
            rewards.append(metrics["reward_mean"])
            log.write(json.dumps(metrics) + "\n")
            maybe_evaluate()
            if policy.step != start_step and policy.step % save_every == 0:
                policy.save()
            progress.update(
                bar,
                advance=1,
                status=f"step {policy.step} reward {metrics['reward_mean']:.3f} "
                f"loss {metrics.get('loss', 0.0):+.3f} groups {int(metrics['groups_used'])}/{questions}",
            )
    if policy.step % save_every != 0:  # the loop already saved this step otherwise
        policy.save()
    png = plot_rewards(out / "reward_curve.png", rewards, [(s - start_step, r) for s, r in evals])
    head = sum(rewards[:10]) / min(10, len(rewards))
    tail = sum(rewards[-10:]) / min(10, len(rewards))
    console.print(f"mean reward: first {min(10, len(rewards))} steps {head:.3f}, last {tail:.3f}")
    console.print(f"reward curve: {png}")
