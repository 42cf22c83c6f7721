"""`swarmp2p experiment sharing`: local/external splits of the training groups, side by side."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import typer

experiment_app = typer.Typer(
    name="experiment",
    help="Experiments run in the simulator (docs/experiments.md).",
    no_args_is_help=True,
    add_completion=False,
)

DEFAULT_ROUNDS = 15
"""What fits the defaults (8 configurations x 3 seeds, 8 peers, 2 jobs) in 30 minutes on 2 cores."""


def register(app: typer.Typer) -> None:
    app.add_typer(experiment_app, name="experiment")


@experiment_app.callback()
def _group() -> None:
    """Experiments run in the simulator (docs/experiments.md)."""


@experiment_app.command(name="sharing")
def sharing(
    peers: int = typer.Option(8, "--peers", help="Peers in the swarm (trainer: at most 32)."),
    rounds: int = typer.Option(DEFAULT_ROUNDS, "--rounds", help="Rounds per run."),
    splits: str = typer.Option(
        "8/0,6/2,4/4,2/6", "--splits", help="Local/external groups per update, L + E the same for all."
    ),
    variants: str = typer.Option(
        "verified-only,unverified,adaptive,filtered",
        "--variants",
        help="Extra rows, each on the middle split: verified-only, unverified, adaptive, filtered, "
        "ratio-one (no off-policy correction of external rollouts), or none.",
    ),
    seeds: int = typer.Option(3, "--seeds", help="Seeds per configuration (1, 2, ... N)."),
    first_seed: int = typer.Option(1, "--first-seed", help="The first seed."),
    policy: str = typer.Option(
        "trainer", "--policy", help="trainer (real tiny model) or sim (simulated learner)."
    ),
    hetero: bool = typer.Option(
        False,
        "--hetero",
        help="Half the peers run a larger model (1.6M parameters, pre-trained longer); rows per size.",
    ),
    questions: int = typer.Option(
        16,
        "--questions",
        help="Questions each peer answers per round (more than L + E: zero-advantage groups are dropped).",
    ),
    group_size: int = typer.Option(8, "--group-size", help="Completions per question (G)."),
    eval_every: int = typer.Option(
        5, "--eval-every", help="Held-out evaluation every N rounds (and at start/end)."
    ),
    eval_questions: int = typer.Option(
        100, "--eval-questions", help="Held-out questions per task (trainer)."
    ),
    eval_split: str = typer.Option(
        "test", "--eval-split", help="Held-out split (trainer): test for results, or validation."
    ),
    forgers: int = typer.Option(2, "--forgers", help="Reward-inverting peers in the verification rows."),
    fetch_sample: int = typer.Option(
        None, "--fetch-sample", help="Batches fetched per peer and round (default: all; sim: 8)."
    ),
    warmup_steps: int = typer.Option(
        -1,
        "--warmup-steps",
        help="Supervised format warm-up of the shared start (-1: only for an un-pre-trained tiny model).",
    ),
    jobs: int = typer.Option(2, "--jobs", help="Runs in parallel (one process and one core each)."),
    tasks: str = typer.Option(
        None,
        "--tasks",
        help="Comma-separated reasoning-gym tasks of every peer (trainer; default: the trainer's own). "
        "The specialised setting needs two or more.",
    ),
    setting: str = typer.Option(
        "identical",
        "--setting",
        help="The swarm the splits run in, comma-separated for several (each in OUT/NAME): identical, "
        "specialised, capability-gap, sparse, compute-matched (docs/experiments.md).",
    ),
    out: Path = typer.Option(
        Path("runs/sharing"), "--out", help="Directory for table.md/json, plots, settings."
    ),
) -> None:
    """Run every configuration with every seed; write DIR/table.md, table.json, reward.png,
    accuracy.png and settings.json."""
    import logging

    from rich.console import Console
    from rich.markup import escape

    from simulator.experiment import ExperimentError, ExperimentSettings, parse_splits, parse_variants
    from simulator.experiment_report import write_settings_table
    from simulator.scenario import MAX_TRAINER_PEERS

    console = Console(stderr=True, soft_wrap=True)
    try:
        if policy == "trainer" and peers > MAX_TRAINER_PEERS:
            raise ExperimentError(
                f"--policy trainer runs a real model per peer: at most {MAX_TRAINER_PEERS} peers"
            )
        names = [part.strip() for part in setting.split(",") if part.strip()] or ["identical"]
        base = ExperimentSettings(
            peers=peers,
            rounds=rounds,
            splits=parse_splits(splits),
            variants=parse_variants(variants),
            seeds=tuple(range(first_seed, first_seed + seeds)),
            policy=policy,
            hetero=hetero,
            questions_per_round=questions,
            group_size=group_size,
            eval_every=eval_every,
            eval_questions=eval_questions,
            eval_split=eval_split,
            forgers=forgers,
            fetch_sample=(8 if policy == "sim" and peers > 16 else 0)
            if fetch_sample is None
            else fetch_sample,
            warmup_steps=warmup_steps,
            jobs=max(1, jobs),
            trainer=(("tasks", tuple(t.strip() for t in tasks.split(",") if t.strip())),) if tasks else (),
        )
        runs = [(attrs.evolve(base, setting=name), out / name if len(names) > 1 else out) for name in names]
    except (ExperimentError, ValueError) as error:
        console.print(f"[red]{escape(str(error))}[/red]", soft_wrap=True)
        raise typer.Exit(2) from None
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        console.print(f"[red]cannot create output directory {out}: {error.strerror}[/red]")
        raise typer.Exit(2) from None
    logging.basicConfig(level=logging.ERROR)
    command = shlex.join(["swarmp2p", *sys.argv[1:]])
    finished = []
    for settings, folder in runs:
        if len(runs) > 1:
            console.print(f"[bold]setting {settings.setting}[/bold] -> {folder}")
        _run_one(settings, folder, command, console)
        finished.append((settings, folder))
    if len(runs) > 1:
        table = write_settings_table(finished, out)
        console.print(table.read_text(), markup=False, highlight=False)
        console.print(f"wrote {table}")


def _run_one(settings: Any, out: Path, command: str, console: Any) -> None:
    """One setting: every arm with every seed, its outputs in `out`."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from simulator.experiment import run_experiment
    from simulator.experiment_report import write_outputs

    arms = settings.arms()
    per_arm = len(settings.seeds) * settings.rounds

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rounds"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        total = progress.add_task(
            f"[bold]{len(arms)} configurations x {len(settings.seeds)} seeds[/bold]",
            total=per_arm * len(arms),
        )
        tasks = {arm.name: progress.add_task(f"  {arm.name}", total=per_arm) for arm in arms}

        def on_round(arm: str, _seed: int, _round: int) -> None:
            progress.advance(tasks[arm])
            progress.advance(total)

        started = time.perf_counter()
        jobs_done = run_experiment(settings, out, on_round=on_round)
    elapsed = time.perf_counter() - started
    written = write_outputs(settings, jobs_done, out, command, elapsed)
    from swarmp2p.dashboard.app import write_html_report
    from swarmp2p.dashboard.sources import experiment_status

    written.append(write_html_report(experiment_status(out), out / "dashboard.html", title="experiment"))
    console.print((out / "table.md").read_text(), markup=False, highlight=False)
    console.print("\n".join(f"wrote {path}" for path in written))
    console.print(f"{len(jobs_done)} runs in {elapsed / 60:.1f} min ({settings.jobs} at a time)")
