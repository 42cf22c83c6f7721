"""`swarmp2p train`: single-peer GRPO training with no network, a progress bar and a reward plot.

The command reads the settings, loads the model, shows progress and prints the summary; the loop
itself is trainer/solo.py."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from trainer.selection import DEFAULT_WINDOW

if TYPE_CHECKING:  # the command imports torch-side modules only when it runs
    from trainer.solo import SoloResult, SoloRun

TRAIN_DATA_DIR = ".swarmp2p-train"
"""`train`'s own default data dir: never the node's `.swarmp2p`."""


def register(app: typer.Typer) -> None:
    app.command(name="train")(train)


def train(
    model: str = typer.Option(
        None,
        "--model",
        help='"tiny" (built offline), "auto" (by accelerator memory), a Hugging Face id, or a folder.',
    ),
    steps: int = typer.Option(
        200,
        "--steps",
        min=1,
        help="GRPO iterations to run: each samples --questions questions and updates on them, except "
        "one whose groups all score alike (no advantage, no update: the step count then lags).",
    ),
    questions: int = typer.Option(
        32,
        "--questions",
        min=1,
        help="Questions per step (G completions each): 32 x 8 = 256 rollouts per update.",
    ),
    warmup_steps: int = typer.Option(
        -1,
        "--warmup-steps",
        help="Supervised format warm-up steps before GRPO (-1: none; the tiny model is pre-trained).",
    ),
    data_dir: Path = typer.Option(
        None,
        "--data-dir",
        help=f"Checkpoints and model cache (default {TRAIN_DATA_DIR}; never a running node's).",
    ),
    out: Path = typer.Option(
        Path("runs/train"), "--out", help="Output folder: reward_curve.png, metrics.jsonl."
    ),
    config_file: Path = typer.Option(None, "--config", help="TOML file with a \\[trainer] section."),
    device: str = typer.Option(None, "--device", help="auto, cpu, cuda, cuda:N or mps."),
    dtype: str = typer.Option(
        None,
        "--dtype",
        help="auto (bf16 autocast on a GPU with bf16 tensor cores, else fp32), fp32 or bf16-autocast; "
        "weights stay fp32.",
    ),
    tasks: str = typer.Option(None, "--tasks", help="Comma-separated reasoning-gym tasks."),
    format_reward: float = typer.Option(
        None, "--format-reward", help="Weight of the format reward in [0, 1]."
    ),
    eval_every: int = typer.Option(
        None,
        "--eval-every",
        help="Held-out evaluation every K steps (0: never; default: config, else 25).",
    ),
    eval_questions: int = typer.Option(None, "--eval-questions", help="Held-out questions per task."),
    eval_split: str = typer.Option(
        None,
        "--eval-split",
        help="Held-out split: validation (default; watch runs, choose settings) or test (report results).",
    ),
    threads: int = typer.Option(None, "--threads", help="CPU threads for torch (0: all cores)."),
    seed: int = typer.Option(None, "--seed"),
    resume: bool = typer.Option(True, "--resume/--fresh", help="Continue from the newest checkpoint."),
    constant_lr: bool = typer.Option(
        False, "--constant-lr", help="Keep lr constant (default: cosine to 10% over this run's steps)."
    ),
    save_every: int = typer.Option(10, "--save-every", min=1, help="Checkpoint every N steps."),
    select: bool = typer.Option(
        True,
        "--select/--no-select",
        help="Keep the weights of the best validation evaluation (OUT/best-model) and report the "
        "test split on them and on the start.",
    ),
    select_window: int = typer.Option(
        DEFAULT_WINDOW,
        "--select-window",
        min=1,
        help="Choose by the mean of the last N validation evaluations (1: the single best one).",
    ),
    tensorboard: Path = typer.Option(
        None,
        "--tensorboard",
        help="Write TensorBoard event files here (tensorboard --logdir DIR; [trainer] tensorboard).",
    ),
    wandb: Path = typer.Option(
        None,
        "--wandb",
        help="Write an offline Weights & Biases run here (needs wandb; upload later with wandb sync).",
    ),
) -> None:
    """Train one peer alone on the reasoning-gym task mix and plot its reward curve."""
    import attrs
    from rich.console import Console
    from rich.markup import escape

    from swarmp2p.config import config_or_exit
    from trainer.config import TrainerConfig, user_model_cache
    from trainer.solo import SoloRun, prepare

    console = Console(stderr=True, soft_wrap=True)  # errors stay one line whatever the width
    overrides = {
        "model": model,
        "data_dir": None if data_dir is None else str(data_dir),
        "device": device,
        "dtype": dtype,
        "tasks": tasks,
        "format_reward": format_reward,
        "eval_every": eval_every,
        "eval_questions": eval_questions,
        "eval_split": eval_split,
        "tensorboard": None if tensorboard is None else str(tensorboard),
        "wandb": None if wandb is None else str(wandb),
        "threads": threads,
        "seed": seed,
    }
    # Its own data dir by default: resuming from (and pruning) a node's checkpoints in .swarmp2p
    # would train the node's model alone and delete its newest checkpoints.
    config = config_or_exit(
        TrainerConfig,
        section="trainer",
        file=config_file,
        overrides=overrides,
        defaults={"data_dir": TRAIN_DATA_DIR, "model_cache": user_model_cache()},
    )
    if eval_every is None and config.eval_every == 0:
        config = attrs.evolve(config, eval_every=25)  # a training run shows its held-out curve
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        console.print(f"[red]cannot create output folder {escape(str(out))}: {escape(str(error))}[/red]")
        raise typer.Exit(2) from None

    from swarmp2p.model_source import ModelUnreachable, check_model_reachable
    from swarmp2p.node_logging import quiet_library_warnings

    quiet_library_warnings()

    if config.model == "auto":  # by accelerator memory, from the default pools (docs/node.md)
        config = _pick_auto_model(config, console)
    try:  # seconds, not transformers' minute of retries, for a hub id with no network
        check_model_reachable(config.model)
    except ModelUnreachable as error:
        console.print(f"[red]{escape(str(error))}[/red]")  # as a model that fails to load
        raise typer.Exit(2) from None
    dir_lock, board = _lock_and_open_logs(config, console)

    policy = _load_policy(config, console)

    run = SoloRun(
        steps=steps,
        questions=questions,
        save_every=save_every,
        select=select,
        select_window=select_window,
        warmup_steps=warmup_steps,
        resume=resume,
        constant_lr=constant_lr,
    )
    losses = prepare(policy, run)
    config = policy.config
    if losses:
        console.print(f"format warm-up: {len(losses)} steps, loss {losses[0]:.2f} -> {losses[-1]:.2f}")
    result = _train_with_progress(policy, run, out, board, console)
    dir_lock.release()
    if board is not None:
        board.close()
    if config.tensorboard:
        console.print(f"tensorboard: tensorboard --logdir {config.tensorboard}")
    if config.wandb:
        runs = Path(config.wandb) / "wandb"
        console.print(f"wandb: offline run in {runs} (upload: wandb sync {runs}/offline-run-*)")
    _print_summary(console, result, out)


def _pick_auto_model(config: Any, console: Any) -> Any:
    """`config` with `--model auto` resolved (swarmp2p/model_auto.py), the pick said in one line;
    a device this machine lacks is a one-line error (exit 2)."""
    import attrs
    from rich.markup import escape

    from swarmp2p.model_auto import ModelPools, hub_reachability, pick_model
    from trainer.device import DeviceError, probe, resolve_device

    facts = probe()
    try:
        device = resolve_device(config.device, facts)
    except DeviceError as error:
        console.print(f"[red]--device: {escape(str(error))}[/red]")
        raise typer.Exit(2) from None
    pick = pick_model(ModelPools(), device, facts, hub_reachability())
    console.print(escape(pick.line()))
    return attrs.evolve(config, model=pick.model)


def _print_summary(console: Any, result: SoloResult, out: Path) -> None:
    """The run's closing lines: training reward, the held-out curve's gain, with selection the
    test figure on the chosen weights, and the plot (trainer/plot.py) written to OUT."""
    from trainer.evaluation import gain
    from trainer.plot import plot_rewards

    rewards, evals, best = result.rewards, result.evals, result.best
    test_start, selected = result.test_start, result.selected
    tests = [] if test_start is None or selected is None else [test_start, selected]
    png = plot_rewards(out / "reward_curve.png", rewards, evals, first_step=result.start_step, tests=tests)
    head = sum(rewards[:10]) / min(10, len(rewards))
    tail = sum(rewards[-10:]) / min(10, len(rewards))
    console.print(f"mean training reward: first {min(10, len(rewards))} steps {head:.3f}, last {tail:.3f}")
    if len(evals) >= 2:
        first, last = evals[0], evals[-1]
        console.print(
            f"held-out accuracy: step {first['step']} {first['accuracy']:.3f} -> step {last['step']} "
            f"{last['accuracy']:.3f} (gain {gain(first, last).text()}, 95% interval over questions), "
            f"{last['questions']} questions, {last['split']} split"
        )
    if test_start is not None and selected is not None and best is not None:
        console.print(
            f"test accuracy (the reported figure): start {test_start['accuracy']:.3f} -> "
            f"{selected['accuracy']:.3f} (gain {gain(test_start, selected).text()}, 95% interval over "
            f"questions) with the "
            f"weights of step {best.step}, chosen by validation accuracy {best.accuracy:.3f} "
            f"(mean of the last {best.window} evaluations {best.score:.3f}); "
            f"{selected['questions']} test questions; weights in {out / 'best-model'}"
        )
    console.print(f"curves: {png}")


def _lock_and_open_logs(config: Any, console: Any) -> tuple[Any, Any]:
    """The data dir, locked (held until the process exits or the run releases it), and the scalar
    log the config asks for (or None); each failure a one-line error, exit 2."""
    import attrs
    from rich.markup import escape

    from swarmp2p.datadir import DataDirInUse, lock_data_dir

    try:
        config.data_path.mkdir(parents=True, exist_ok=True)
        dir_lock = lock_data_dir(config.data_path)  # held until the process exits
    except DataDirInUse as error:
        console.print(f"[red]error: {escape(str(error))}[/red]")
        raise typer.Exit(2) from None
    except OSError as error:
        console.print(f"[red]cannot use data dir {escape(config.data_dir)}: {escape(str(error))}[/red]")
        raise typer.Exit(2) from None
    from swarmp2p.scalar_log import ScalarLogUnavailable
    from swarmp2p.scalar_writers import open_scalar_log

    try:
        board = open_scalar_log(
            tensorboard=config.tensorboard,
            wandb=config.wandb,
            name=f"train-seed-{config.seed}",
            job_type="train",
            config={k: v for k, v in attrs.asdict(config).items() if k not in ("data_dir", "wandb")},
        )
    except ScalarLogUnavailable as error:
        console.print(f"[red]{escape(str(error))}[/red]")
        raise typer.Exit(2) from None
    return dir_lock, board


def _load_policy(config: Any, console: Any) -> Any:
    """The TrainerPolicy, loading (or pre-training the tiny model once) under a transient bar;
    a model or task that cannot load is a one-line error, exit 2."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from trainer.model import ModelLoadError
    from trainer.policy import TrainerPolicy
    from trainer.tasks import TaskError

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
        transient=True,
    ) as build:
        bar = build.add_task(f"loading model {config.model!r}", total=None, status="")

        def pretraining(step: int, total: int, loss: float) -> None:
            build.update(
                bar,
                description="pre-training the tiny model (once)",
                total=total,
                completed=step,
                status=f"loss {loss:.3f}",
            )

        try:
            policy = TrainerPolicy(
                config,
                log=lambda message: console.print(f"[dim]{escape(message)}[/dim]"),
                build_progress=pretraining,
            )
        except (ModelLoadError, TaskError) as error:
            console.print(f"[red]{escape(str(error))}[/red]")
            raise typer.Exit(2) from None
    params = sum(p.numel() for p in policy.model.parameters())
    console.print(
        f"model {config.model!r}: {params / 1e6:.2f}M params on {policy.device} ({policy.precision.label})"
    )
    return policy


def _train_with_progress(policy: Any, run: SoloRun, out: Path, board: Any, console: Any) -> SoloResult:
    """trainer/solo.py's loop under a progress bar that appears once the starting evaluations
    are done."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from trainer.solo import SoloHooks, train_alone

    steps, questions = run.steps, run.questions
    with Progress(
        TextColumn("[bold]train"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
    ) as progress:
        bars: list[Any] = []

        def stepped(step: int, metrics: dict[str, Any]) -> None:
            progress.update(
                bars[0],
                advance=1,
                status=f"step {step} reward {metrics['reward_mean']:.3f} "
                f"loss {metrics.get('loss', 0.0):+.3f} groups {int(metrics['groups_used'])}/{questions}",
            )

        def started() -> None:  # after the starting evaluations, as the steps begin
            bars.append(progress.add_task("train", total=steps, status=""))

        hooks = SoloHooks(started=started, stepped=stepped)
        result = train_alone(policy, run, out, board=board, hooks=hooks)
    return result
