"""`swarmp2p chain ...`: compile, deploy and operate the SwarmCoordinator contract.

Heavy imports (web3, vyper) happen inside each command so that `swarmp2p --help` stays fast.
Every chain failure prints one line `error: <reason>` on stderr and exits with status 1.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

chain_app = typer.Typer(
    help="The on-chain coordinator: compile, deploy, inspect, run a stage manager.",
    no_args_is_help=True,
)

T = TypeVar("T")


def register(app: typer.Typer) -> None:
    app.add_typer(chain_app, name="chain")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _guarded(action: Callable[[], T]) -> T:
    from swarmp2p.chain.errors import ChainError

    try:
        return action()
    except ChainError as error:
        _fail(error.reason)
        raise AssertionError("unreachable") from None


def _client(rpc: str, contract: str | None, key: Path | None) -> Any:
    """A ContractClient for `contract` on `rpc`; a throwaway account if no key (read-only use)."""
    from eth_account import Account
    from web3 import HTTPProvider, Web3

    from swarmp2p.chain.artifact import load_artifact
    from swarmp2p.chain.client import ContractClient
    from swarmp2p.chain.errors import ChainConfigError
    from swarmp2p.chain.keys import load_key_file

    if not rpc.startswith(("http://", "https://")):
        raise ChainConfigError(f"RPC URL must be http:// or https://, got {rpc!r}")
    if contract is not None and not Web3.is_address(contract):
        raise ChainConfigError(f"not an Ethereum address: {contract!r}")
    account = load_key_file(key) if key is not None else Account.create()
    w3 = Web3(HTTPProvider(rpc, request_kwargs={"timeout": 10}))
    return ContractClient(w3, contract or "0x" + "00" * 20, load_artifact().abi, account)


@chain_app.command("compile")
def compile_command(
    check: bool = typer.Option(
        False, "--check", help="Only verify that the committed artifact is up to date."
    ),
) -> None:
    """Compile the contract source (swarmp2p/chain/contracts/SwarmCoordinator.vy) into its artifact."""
    from swarmp2p.chain.artifact import ARTIFACT_PATH, artifact_json, compile_source, write_artifact

    compiled = compile_source()
    if check:
        committed = ARTIFACT_PATH.read_text() if ARTIFACT_PATH.exists() else ""
        if committed != artifact_json(compiled):
            _fail(f"{ARTIFACT_PATH} is out of date: run `swarmp2p chain compile`")
        typer.echo(f"{ARTIFACT_PATH.name} is up to date ({compiled.compiler})")
        return
    write_artifact(compiled)
    typer.echo(
        f"wrote {ARTIFACT_PATH} ({compiled.compiler}, {len(compiled.bytecode) // 2 - 1} bytes of bytecode)"
    )


@chain_app.command("new-key")
def new_key_command(
    path: Path | None = typer.Argument(None, help="Where to write the key (same as --out)."),
    out: Path | None = typer.Option(None, "--out", help="Where to write the key (created with mode 600)."),
) -> None:
    """Create a new Ethereum private key file and print its address (fund it before use)."""
    import secrets

    from eth_account import Account

    from swarmp2p.chain.keys import write_key_file

    if (path is None) == (out is None):
        _fail("give the key file once: swarmp2p chain new-key --out FILE")
    path = out or path
    assert path is not None
    key = secrets.token_bytes(32)
    try:
        write_key_file(path, key)
    except FileExistsError:
        _fail(f"{path} already exists; refusing to overwrite a key")
    except OSError as error:
        _fail(f"cannot write {path}: {error.strerror}")
    typer.echo(Account.from_key(key).address)


@chain_app.command("deploy")
def deploy_command(
    rpc: str = typer.Option(..., "--rpc", help="JSON-RPC URL of the chain, e.g. http://127.0.0.1:8545"),
    key: Path = typer.Option(..., "--key", help="Hex private key file (mode 600) of the deployer."),
    stage_count: int = typer.Option(2, "--stage-count", min=1, max=16, help="Stages per round."),
    stage_seconds: int = typer.Option(30, "--stage-seconds", min=0, help="Published stage length (a hint)."),
) -> None:
    """Deploy the SwarmCoordinator; the deployer holds every role. Prints the contract address."""
    from swarmp2p.chain.artifact import load_artifact

    def deploy() -> str:
        client = _client(rpc, None, key)
        return client.deploy(load_artifact().bytecode, stage_count, stage_seconds)

    address = _guarded(deploy)
    typer.echo(f"deployed SwarmCoordinator ({stage_count} stages of {stage_seconds} s)", err=True)
    typer.echo(address)


@chain_app.command("status")
def status_command(
    rpc: str = typer.Option(..., "--rpc"),
    contract: str = typer.Option(..., "--contract"),
) -> None:
    """Show the round clock, roles, peers, bootnodes and both leaderboards."""
    from rich.console import Console
    from rich.table import Table

    from swarmp2p.chain.coordinator import REWARD_SCALE

    def read() -> dict[str, Any]:
        client = _client(rpc, contract, None)
        round_, stage, stage_count, started, duration = client.call("roundInfo")
        return {
            "clock": f"round {round_}, stage {stage} of {stage_count} (started at unix {started}, "
            f"{duration} s stages)",
            "owner": client.call("owner"),
            "stage manager": client.call("stageManager"),
            "peers": client.call("peerCount"),
            "bootnodes": client.call("getBootnodes"),
            "rewards": client.call("rewardLeaderboard"),
            "wins": client.call("winnerLeaderboard"),
        }

    state = _guarded(read)
    console = Console()
    # soft_wrap: keep each line whole so that scripts can grep it whatever the terminal width.
    console.print(f"[bold]SwarmCoordinator[/bold] {contract}: {state['clock']}", soft_wrap=True)
    console.print(
        f"owner {state['owner']}, stage manager {state['stage manager']}, {state['peers']} peers",
        soft_wrap=True,
    )
    for address in state["bootnodes"]:
        console.print(f"bootnode {address}", soft_wrap=True, markup=False)
    table = Table("rank", "peer (by total reward)", "reward", "peer (by wins)", "wins")
    for rank in range(max(len(state["rewards"]), len(state["wins"]))):
        reward = state["rewards"][rank] if rank < len(state["rewards"]) else ("", None)
        wins = state["wins"][rank] if rank < len(state["wins"]) else ("", None)
        table.add_row(
            str(rank + 1),
            reward[0],
            "" if reward[1] is None else f"{reward[1] / REWARD_SCALE:.6f}",
            wins[0],
            "" if wins[1] is None else str(wins[1]),
        )
    console.print(table)


@chain_app.command("add-bootnodes")
def add_bootnodes_command(
    addresses: list[str] = typer.Argument(..., help="libp2p multiaddrs (at most 16 per call)."),
    rpc: str = typer.Option(..., "--rpc"),
    contract: str = typer.Option(..., "--contract"),
    key: Path = typer.Option(..., "--key", help="Key file of the bootnode manager."),
) -> None:
    """Publish bootnode addresses on the contract (bootnode manager only)."""
    _guarded(lambda: _client(rpc, contract, key).transact("addBootnodes", addresses))
    typer.echo(f"added {len(addresses)} bootnode(s)")


@chain_app.command("stage-manager")
def stage_manager_command(
    rpc: str = typer.Option(..., "--rpc"),
    contract: str = typer.Option(..., "--contract"),
    key: Path = typer.Option(..., "--key", help="Key file of the stage manager."),
    stage_seconds: float = typer.Option(30.0, "--stage-seconds", min=0.1),
    stages: int = typer.Option(0, "--stages", min=0, help="Stop after this many advances (0: run forever)."),
) -> None:
    """Advance the contract one stage every --stage-seconds. A failed advance is logged and retried.
    Ctrl-C or SIGTERM stops it (exit 0)."""
    try:
        client = _guarded(lambda: _client(rpc, contract, key))
        typer.echo(
            f"stage manager: advancing {contract} every {stage_seconds:g} s as "
            f"{client.account.address}; Ctrl-C stops it",
            err=True,
        )
        _run_stage_manager(client, stage_seconds, stages)
    except KeyboardInterrupt:  # before the loop took over the signals: a stop all the same
        pass


@chain_app.command("devnet")
def devnet_command(
    nodes: int = typer.Option(2, "--nodes", min=1, max=64, help="How many node keys to write."),
    directory: Path = typer.Option(
        Path("devnet"), "--dir", help="Where keys and node data dirs go (must be empty or new)."
    ),
    stage_seconds: float = typer.Option(30.0, "--stage-seconds", min=1.0, help="Seconds per stage."),
    port: int = typer.Option(8545, "--port", min=0, help="RPC port on 127.0.0.1 (0: any free port)."),
    rounds: int = typer.Option(
        0, "--rounds", min=0, help="Stop after this many rounds (0: run until Ctrl-C)."
    ),
    backend: str = typer.Option(
        "auto",
        "--backend",
        help="anvil, embedded (the in-process py-evm chain served over HTTP), or auto: anvil if installed.",
    ),
) -> None:
    """A local chain in one command: anvil (or the embedded chain) on 127.0.0.1, the contract
    deployed, funded keys for --nodes nodes, and a stage manager advancing rounds; prints each
    node's command."""

    import signal

    from swarmp2p.chain.devnet import DEVNET_FILE, start_devnet

    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # a stop at any moment still stops anvil
    chain, devnet = _guarded(
        lambda: start_devnet(directory, nodes, stage_seconds=stage_seconds, port=port, backend=backend)
    )
    try:
        # the stage manager's client first: the lines below tell a user (or a test) the devnet is
        # ready, and a Ctrl-C right after them must not land in a slow web3 set-up
        client = _guarded(lambda: _client(devnet.rpc, devnet.contract, devnet.manager_key))
        kind = "anvil" if type(chain).__name__ == "Anvil" else "embedded chain (py-evm)"
        typer.echo(f"{kind} on {devnet.rpc}; SwarmCoordinator {devnet.contract} ({stage_seconds:g} s rounds)")
        typer.echo(f"{nodes} funded key(s) (100 ETH each) and identities under {directory.resolve()}")
        typer.echo("run each node in its own terminal (the first one is the others' bootstrap):")
        for node in devnet.nodes:
            typer.echo(f"  {node.command}")
        typer.echo(f"state: swarmp2p chain status --rpc {devnet.rpc} --contract {devnet.contract}")
        typer.echo(
            f"all of it: {directory.resolve() / DEVNET_FILE}; Ctrl-C stops the chain (its state is lost)"
        )
        _run_stage_manager(client, stage_seconds, rounds, quiet=True)
    except KeyboardInterrupt:  # Ctrl-C before the stage manager took over the signals: a stop too
        pass
    finally:
        chain.stop()
    typer.echo("devnet stopped")


def _run_stage_manager(client: Any, stage_seconds: float, stages: int, *, quiet: bool = False) -> None:
    """Advance one stage every `stage_seconds` until `stages` advances (0: forever) or SIGINT /
    SIGTERM. A failed advance is logged and retried after 1 s."""
    import signal

    import trio

    from swarmp2p.chain.errors import ChainError

    async def run() -> None:
        limiter = trio.CapacityLimiter(1)
        done = 0
        next_at = trio.current_time() + stage_seconds
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def stop_on_signal() -> None:
                    async for _ in signals:
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(stop_on_signal)
                while stages == 0 or done < stages:
                    await trio.sleep_until(next_at)
                    try:
                        receipt = await trio.to_thread.run_sync(
                            client.transact, "updateStageAndRound", limiter=limiter
                        )
                    except ChainError as error:
                        typer.echo(f"advance failed, retrying in 1 s: {error.reason}", err=True)
                        next_at = trio.current_time() + 1.0
                        continue
                    done += 1
                    round_, stage, *_ = await trio.to_thread.run_sync(
                        client.call, "roundInfo", limiter=limiter
                    )
                    if not quiet or stage == 0:
                        typer.echo(f"round {round_} stage {stage} (block {receipt['blockNumber']})")
                    next_at += stage_seconds
                nursery.cancel_scope.cancel()

    trio.run(run)
