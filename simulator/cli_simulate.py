"""`swarmp2p simulate`: many virtual peers running the real round loop on a virtual clock.

Registered by the CLI root (swarmp2p/cli.py) by name: the command lives with the simulator it
runs, so that the runtime package never imports the simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from protocol.games import REGISTRY


def register(app: typer.Typer) -> None:
    app.command(name="simulate")(simulate)


def simulate(
    peers: int = typer.Option(None, "--peers", help="Number of peers (scenario default: 10)."),
    rounds: int = typer.Option(None, "--rounds", help="Number of rounds (scenario default: 10)."),
    seed: int = typer.Option(None, "--seed", help="Seed: the same seed gives a byte-identical report."),
    scenario: str = typer.Option(
        None, "--scenario", help="Scenario TOML file, or a built-in name: baseline, churn30, partition, ..."
    ),
    local: int = typer.Option(None, "--local", help="Local groups per training step (n_local)."),
    external: int = typer.Option(None, "--external", help="External groups per training step (n_external)."),
    fetch_sample: int = typer.Option(
        None, "--fetch-sample", help="Batches each peer fetches and verifies per round (0 = all)."
    ),
    policy: str = typer.Option(
        None,
        "--policy",
        help="sim (cheap simulated learner) or trainer (the real tiny-model trainer; at most 32 peers).",
    ),
    coordinator: str = typer.Option(
        None,
        "--coordinator",
        help="schedule (chain-less round clock) or chain (the contract on one in-process chain).",
    ),
    game: str = typer.Option(
        None,
        "--game",
        help="The swarm's game, by name: " + ", ".join(
            f"{spec.name} ({' -> '.join(spec.stage_names)})" for spec in REGISTRY.values()
        )
        + "; default single.",
    ),
    workers: int = typer.Option(
        None,
        "--workers",
        help="Processes to spread the peers over, one per core (default 1). A report is reproduced by "
        "its seed and this count; more than 1 needs the simulated learner and the schedule coordinator.",
    ),
    out: Path = typer.Option(Path("runs/simulate"), "--out", help="Directory for report.json and plots."),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write PNG plots."),
    solo: bool = typer.Option(
        None,
        "--solo/--no-solo",
        help="Also run the same peers with no external groups (each alone), the baseline drawn beside "
        "the swarm (default: on for the simulated learner, off for the real trainer: it doubles the run).",
    ),
    eval_every: int = typer.Option(
        0,
        "--eval-every",
        min=0,
        help="Held-out evaluation every N rounds on every peer, and once before training (0: none): "
        "report.json's eval_accuracy_mean per round, eval/accuracy in --tensorboard.",
    ),
    tensorboard: Path = typer.Option(
        None,
        "--tensorboard",
        help="Write TensorBoard event files here: a run per peer (reward, loss, KL, grad norm, held-out "
        "accuracy when evaluated, per round) and a 'swarm' run (tensorboard --logdir DIR).",
    ),
) -> None:
    """Simulate a swarm (in-memory network, virtual clock; one process unless --workers); write a report."""
    import logging

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from simulator.report import build_report, report_json, solo_baseline, summary_rows, write_plots
    from simulator.runner import run_simulation
    from simulator.scenario import ScenarioError, load_scenario

    console = Console(stderr=True, soft_wrap=True)  # errors stay one line whatever the width
    try:
        chosen = load_scenario(
            scenario,
            peers=peers,
            rounds=rounds,
            seed=seed,
            n_local=local,
            n_external=external,
            fetch_sample=fetch_sample,
            policy=policy,
            coordinator=coordinator,
            game=game,
            workers=workers,
        )
    except ScenarioError as error:
        console.print(f"[red]{escape(str(error))}[/red]", soft_wrap=True)  # one line, never wrapped
        raise typer.Exit(2) from None
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        console.print(f"[red]cannot create output directory {out}: {error.strerror}[/red]")
        raise typer.Exit(2) from None
    logging.basicConfig(level=logging.ERROR)
    if solo is None:
        solo = chosen.policy != "trainer"
    if tensorboard is not None:
        from swarmp2p.tblog import TensorBoardUnavailable, check_tensorboard

        try:
            check_tensorboard(tensorboard)
        except TensorBoardUnavailable as error:
            console.print(f"[red]{escape(str(error))}[/red]", soft_wrap=True)
            raise typer.Exit(2) from None

    with Progress(
        TextColumn("[bold]simulating[/bold] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rounds"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task(f"{chosen.name}: {chosen.peers} peers", total=chosen.rounds)
        trainer: dict = {"peer_overrides": _evaluation(chosen, eval_every)} if eval_every else {}
        if chosen.policy == "trainer":
            from simulator.trainer_policy import TrainerSimSettings
            from trainer.config import user_model_cache

            trainer.update(
                # per-run peer checkpoints; the tiny model is the trainer's cached build
                work_dir=out / "trainer",
                trainer_settings=TrainerSimSettings(models_dir=user_model_cache()),
            )
        result = run_simulation(chosen, on_round=lambda _round: progress.advance(task), **trainer)
        report = build_report(result)
        if solo:
            import attrs

            alone = attrs.evolve(chosen, n_external=0)
            task = progress.add_task(f"{chosen.name}: the same peers alone (solo)", total=chosen.rounds)
            if "work_dir" in trainer:
                trainer["work_dir"] = out / "trainer-solo"
            solo_result = run_simulation(alone, on_round=lambda _round: progress.advance(task), **trainer)
            report["solo"] = solo_baseline(solo_result)
    report_path = out / "report.json"
    report_path.write_text(report_json(report))
    written = write_plots(report, out) if plots else []
    # the dashboard's page with this report inlined: opens offline, no server (docs/dashboard.md)
    from swarmp2p.dashboard.app import write_html_report
    from swarmp2p.dashboard.sources import report_status

    written.append(write_html_report(report_status(report), out / "dashboard.html", title=chosen.name))

    if tensorboard is not None:
        from simulator.report import write_tensorboard

        write_tensorboard(result, report, tensorboard)
    table = Table(title=f"swarmp2p simulate: {chosen.name}")
    table.add_column("metric")
    table.add_column("value")
    for name, value in summary_rows(report):
        table.add_row(name, value)
    Console().print(table)
    console.print(f"report: {report_path}" + "".join(f"\nplot: {path}" for path in written))
    if tensorboard is not None:
        console.print(f"tensorboard: tensorboard --logdir {tensorboard}")


def _evaluation(scenario: Any, every: int) -> dict[str, Any]:
    """Peer settings for a held-out evaluation every `every` rounds (and before training), with
    the question count its timing estimate needs: the learner's per-task count times the tasks."""
    from swarmp2p.heldout import EvalSettings

    if scenario.policy == "trainer":
        from trainer.config import TrainerConfig

        config = TrainerConfig()
        questions = config.eval_questions * len(scenario.tasks or config.tasks)
    else:
        from simulator.policy import SimPolicyParams
        from simulator.registry import DEFAULT_TASKS

        questions = SimPolicyParams().eval_questions * len(scenario.tasks or DEFAULT_TASKS)
    return {"evaluation": EvalSettings(every=every, before_train=True, questions=questions)}
