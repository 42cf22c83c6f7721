"""`swarmp2p node`: run one swarm peer (libp2p network, round loop, trainer, dashboard)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import attrs
import typer

# Light modules (no torch, no libp2p): imported here so that --help can show the defaults.
from protocol.games import GAME_NAMES
from swarmp2p.node_config import NODE_TRAINER_DEFAULTS, NodeConfig
from trainer.config import TrainerConfig

_EVAL_EVERY = NODE_TRAINER_DEFAULTS["eval_every"]


def _help(text: str, field: str, cls: type = NodeConfig) -> str:
    """`text` with the field's default (flags default to None so that "not given" can fall back
    to the environment and the config file; typer would show no default at all)."""
    default = attrs.fields_dict(cls)[field].default
    if isinstance(default, tuple):
        default = ", ".join(default) or "none"
    return f"{text.rstrip('.')} (default: {default})."


def register(app: typer.Typer) -> None:
    app.command(name="node")(node)


def node(
    config: Path | None = typer.Option(
        None, "--config", help="TOML file with \\[node] and \\[trainer] sections (default: none)."
    ),
    data_dir: str | None = typer.Option(
        None, "--data-dir", help=_help("Where identity, checkpoints and logs live.", "data_dir")
    ),
    identity: str | None = typer.Option(
        None, "--identity", help="Identity key file (created, 0600; default: <data dir>/identity.key)."
    ),
    listen: list[str] | None = typer.Option(
        None, "--listen", help=_help("Listen multiaddr (repeatable).", "listen")
    ),
    bootstrap: list[str] | None = typer.Option(
        None, "--bootstrap", help="Peer multiaddr to join (repeatable; default: none, start a new swarm)."
    ),
    round_seconds: float | None = typer.Option(
        None, "--round-seconds", help=_help("Round length of a new swarm.", "round_seconds")
    ),
    game: str | None = typer.Option(
        None,
        "--game",
        help=_help("Game of a new swarm: " + ", ".join(GAME_NAMES) + ".", "game"),
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help=_help('"tiny", "auto" (by accelerator memory), a local model folder or a model id.', "model"),
    ),
    device: str | None = typer.Option(
        None,
        "--device",
        help="auto, cpu, cuda, cuda:N or mps; bf16 only on a CUDA device that supports it "
        "(default: \\[trainer] device, else auto).",
    ),
    dtype: str | None = typer.Option(
        None,
        "--dtype",
        help="auto (bf16 autocast on a GPU with bf16 tensor cores, else fp32), fp32 or bf16-autocast; "
        "weights stay fp32 (default: \\[trainer] dtype, else auto).",
    ),
    dashboard_port: int | None = typer.Option(
        None, "--dashboard-port", help=_help("Dashboard port; 0 = off.", "dashboard_port")
    ),
    dashboard_host: str | None = typer.Option(
        None, "--dashboard-host", help=_help("Address the dashboard binds.", "dashboard_host")
    ),
    chain_rpc: str | None = typer.Option(
        None, "--chain-rpc", help="Ethereum JSON-RPC URL of the coordinator (default: none, no chain)."
    ),
    contract: str | None = typer.Option(
        None, "--contract", help="SwarmCoordinator contract address (default: none)."
    ),
    eth_key: str | None = typer.Option(
        None, "--eth-key", help="Ethereum key file for the coordinator (default: none)."
    ),
    log_level: str | None = typer.Option(
        None, "--log-level", help=_help("debug, info or warning.", "log_level")
    ),
    tensorboard: str | None = typer.Option(
        None,
        "--tensorboard",
        help="Write TensorBoard scalars per round to this folder (default: none).",
    ),
    wandb: str | None = typer.Option(
        None,
        "--wandb",
        help="Write the same scalars as an offline Weights & Biases run in this folder (needs wandb).",
    ),
    eval_every: int | None = typer.Option(
        None,
        "--eval-every",
        help=f"Held-out evaluation every N rounds (0: never; default: {_EVAL_EVERY}).",
    ),
    eval_before_train: bool | None = typer.Option(
        None,
        "--eval-before-train/--no-eval-before-train",
        help="Evaluate once before the first round (default: yes).",
    ),
    eval_questions: int | None = typer.Option(
        None,
        "--eval-questions",
        help=_help("Held-out questions per task (the same set every time).", "eval_questions", TrainerConfig),
    ),
    eval_split: str | None = typer.Option(
        None,
        "--eval-split",
        help=_help("Held-out split: validation, or test for reported results.", "eval_split", TrainerConfig),
    ),
    eval_generations_to_log: int | None = typer.Option(
        None,
        "--eval-generations-to-log",
        help=_help("Sample answers kept with each evaluation.", "eval_generations_to_log", TrainerConfig),
    ),
    threads: int | None = typer.Option(
        None,
        "--threads",
        min=1,
        help="CPU threads for torch, OpenMP and MKL (sets OMP_NUM_THREADS and MKL_NUM_THREADS; "
        "default: \\[trainer] threads, else all cores).",
    ),
    restart_on_failure: bool = typer.Option(
        False,
        "--restart-on-failure",
        help="Run the node under a supervisor that restarts it when it crashes (same data dir and "
        "peer id, doubling backoff; gives up after 5 failures in a row within 60 s of starting; "
        "default: off).",
    ),
) -> None:
    """Run a swarm peer. With no arguments: start a new local swarm on the tiny model."""
    if restart_on_failure:
        import sys

        from swarmp2p.supervise import node_command, supervise

        # The same command line without the flag, as a child process (argv[0] may be a script
        # or `python -m swarmp2p.cli`: everything after the `node` subcommand is ours).
        args = sys.argv[sys.argv.index("node") + 1 :]
        child = ["node", *[arg for arg in args if arg != "--restart-on-failure"]]
        raise typer.Exit(supervise(node_command(child)))
    import trio
    from rich.console import Console
    from rich.markup import escape

    from swarmp2p.config import CONFIG_FILE_ENV, config_or_exit
    from swarmp2p.node import NodeError, run_node

    node_config = config_or_exit(
        NodeConfig,
        section="node",
        file=config,
        overrides={
            "data_dir": data_dir,
            "identity": identity,
            "listen": tuple(listen) if listen else None,
            "bootstrap": tuple(bootstrap) if bootstrap else None,
            "round_seconds": round_seconds,
            "game": game,
            "model": model,
            "dashboard_port": dashboard_port,
            "dashboard_host": dashboard_host,
            "tensorboard": tensorboard,
            "wandb": wandb,
            "chain_rpc": chain_rpc,
            "contract": contract,
            "eth_key": eth_key,
            "log_level": log_level,
        },
    )
    # The trainer follows the node's model and data dir unless its own section says otherwise.
    trainer_config = config_or_exit(
        TrainerConfig,
        section="trainer",
        file=config,
        overrides={
            "model": model or node_config.model,
            "data_dir": str(Path(node_config.data_dir)),
            "eval_every": eval_every,
            "eval_before_train": eval_before_train,
            "eval_questions": eval_questions,
            "eval_split": eval_split,
            "eval_generations_to_log": eval_generations_to_log,
            "threads": threads,
            "device": device,
            "dtype": dtype,
        },
        defaults=NODE_TRAINER_DEFAULTS,
    )
    apply_thread_limits(trainer_config.threads)
    from swarmp2p import memory

    memory.configure()  # freed ~1 MB messages go back to the OS, not stay resident (memory.py)
    console = Console(soft_wrap=True, highlight=False)
    errors = Console(stderr=True, soft_wrap=True)

    def echo(line: str) -> None:
        console.print(escape(line))

    from swarmp2p import startup_gc

    # Until the node plays, no full collections: torch, transformers and reasoning-gym import
    # inside the run below, and scanning their heap over and over costs seconds (startup_gc.py).
    startup_gc.defer_full_collections()
    try:
        # The printed join command names the config file this node read (flag or variable).
        from_env = os.environ.get(CONFIG_FILE_ENV)
        config_file = config or (Path(from_env) if from_env else None)
        trio.run(lambda: run_node(node_config, trainer_config, echo=echo, config_file=config_file))
        # Stopped and saved: a late Ctrl-C (a second press) must not kill the exit with a traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except NodeError as error:
        errors.print(f"[red]error: {escape(str(error))}[/red]")
        raise typer.Exit(code=error.exit_code) from None
    except KeyboardInterrupt:  # Ctrl-C before the node took over its signals (still importing)
        errors.print("interrupted")
        raise typer.Exit(code=130) from None
    finally:
        startup_gc.resume_full_collections()  # a node that stopped before it played


def apply_thread_limits(threads: int) -> None:
    """Make OpenMP and MKL use `threads` threads (0: leave them alone), as torch will
    (trainer.model.configure_threads). Their pools read the variables once, when torch is first
    imported: this runs before that (the CLI imports torch only inside run_node)."""
    if threads > 0:
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(threads)
