"""`swarmp2p supervise -- node ARGS`: restart a crashed node with backoff (swarmp2p/supervise.py)."""

from __future__ import annotations

import typer

from swarmp2p.supervise import RestartPolicy

_DEFAULTS = RestartPolicy()


def register(app: typer.Typer) -> None:
    app.command(
        name="supervise",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(supervise_command)


def supervise_command(
    ctx: typer.Context,
    initial_backoff: float = typer.Option(
        _DEFAULTS.initial_backoff_s, "--initial-backoff", min=0.0, help="Seconds before the first restart."
    ),
    max_backoff: float = typer.Option(
        _DEFAULTS.max_backoff_s, "--max-backoff", min=0.0, help="Longest wait between restarts (doubling)."
    ),
    fast_seconds: float = typer.Option(
        _DEFAULTS.fast_s, "--fast-seconds", min=0.0, help="A run shorter than this is a fast failure."
    ),
    max_fast_failures: int = typer.Option(
        _DEFAULTS.max_fast_failures, "--max-fast-failures", min=1, help="Give up after this many in a row."
    ),
) -> None:
    """Run `swarmp2p ARGS` (e.g. `-- node --data-dir .peer1`) and restart it when it fails: same
    arguments, so the same data dir and peer id; backoff doubling; gives up after repeated fast
    failures with one line. SIGINT/SIGTERM stop the node cleanly."""
    from swarmp2p.supervise import node_command, supervise

    args = list(ctx.args)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        typer.echo("error: say what to run: swarmp2p supervise -- node [NODE OPTIONS]", err=True)
        raise typer.Exit(1)
    policy = RestartPolicy(initial_backoff, max_backoff, fast_seconds, max_fast_failures)
    raise typer.Exit(supervise(node_command(args), policy))
