"""The `swarmp2p` command line. Each subcommand lives in its own `cli_<name>` module.

Subcommand modules import their heavy dependencies (torch, libp2p, web3) inside the
command function, so that `swarmp2p --help` stays fast.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="swarmp2p",
    help="A peer-to-peer swarm that post-trains small language models with GRPO on reasoning tasks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Keeps `swarmp2p` a command group even when only one subcommand module is present."""


# Order is the order shown in --help. This module is the composition root: it alone names the
# commands of every layer, by module name. The simulator's commands live in the simulator package
# (it sits above the runtime and imports it), so no module of the runtime imports the simulator;
# an install without the simulator still runs every other command (a missing module is skipped).
_SUBCOMMAND_MODULES = (
    "swarmp2p.cli_node",
    "simulator.cli_simulate",
    "swarmp2p.cli_train",
    "simulator.cli_experiment",
    "swarmp2p.cli_chain",
    "swarmp2p.cli_dashboard",
    "swarmp2p.cli_keygen",
    "swarmp2p.cli_supervise",
)

for _name in _SUBCOMMAND_MODULES:
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as error:
        if error.name != _name:  # a real missing dependency inside the module: surface it
            raise
        continue
    _module.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
