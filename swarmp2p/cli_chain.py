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
        path.parent.mkdir(parents=True, exist_ok=True)  # e.g. the new data dir a join line names
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
    with _StopRequest() as stop:
        client = _guarded(lambda: _client(rpc, contract, key))
        typer.echo(
            f"stage manager: advancing {contract} every {stage_seconds:g} s as "
            f"{client.account.address}; Ctrl-C stops it",
            err=True,
        )
        _run_stage_manager(client, stage_seconds, stages, stop)


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

    # while the chain starts, a stop raises (start_devnet stops what it started); once it runs,
    # _StopRequest turns SIGINT/SIGTERM into a flag, before anything says the devnet is ready
    signal.signal(signal.SIGTERM, interrupt)
    chain, devnet = _guarded(
        lambda: start_devnet(directory, nodes, stage_seconds=stage_seconds, port=port, backend=backend)
    )
    try:
        with _StopRequest() as stop:
            client = _guarded(lambda: _client(devnet.rpc, devnet.contract, devnet.manager_key))
            kind = "anvil" if type(chain).__name__ == "Anvil" else "embedded chain (py-evm)"
            typer.echo(
                f"{kind} on {devnet.rpc}; SwarmCoordinator {devnet.contract} ({stage_seconds:g} s rounds)"
            )
            typer.echo(f"{nodes} funded key(s) (100 ETH each) and identities under {directory.resolve()}")
            typer.echo("run each node in its own terminal (they meet through the contract's bootnode):")
            for node in devnet.nodes:
                typer.echo(f"  {node.command}")
            typer.echo(f"state: swarmp2p chain status --rpc {devnet.rpc} --contract {devnet.contract}")
            typer.echo(
                f"all of it: {directory.resolve() / DEVNET_FILE}; Ctrl-C stops the chain (its state is lost)"
            )
            _run_stage_manager(client, stage_seconds, rounds, stop, quiet=True)
    except KeyboardInterrupt:  # the flag's handler was not in place yet: a stop all the same
        pass
    finally:
        chain.stop()
    typer.echo("devnet stopped")


class _StopRequest:
    """SIGINT / SIGTERM only set `requested` while this is active, instead of raising
    KeyboardInterrupt wherever the main thread happens to be (a Ctrl-C landing inside a library's
    set-up, or inside trio's, once left devnet hung or exiting 1). The loop polls the flag."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def _handler(self, _signum: int, _frame: Any) -> None:
        self.requested = True  # nothing else: a handler that takes locks can deadlock its own thread

    def __enter__(self) -> _StopRequest:
        import signal

        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def sleep_until(self, deadline: float) -> bool:
        """Sleep until time.monotonic() reaches `deadline`; False at once if a stop was requested."""
        import time

        while not self.requested:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, 0.1))  # a signal's handler runs within 0.1 s
        return False


def _run_stage_manager(
    client: Any, stage_seconds: float, stages: int, stop: _StopRequest, *, quiet: bool = False
) -> None:
    """Advance one stage every `stage_seconds` until `stages` advances (0: forever) or a stop is
    requested. A failed advance is logged and retried after 1 s. Plain blocking calls: an advance
    in flight when the stop comes finishes first (web3's 10 s timeout bounds it)."""
    import time

    from swarmp2p.chain.errors import ChainError

    done = 0
    next_at = time.monotonic() + stage_seconds
    while (stages == 0 or done < stages) and stop.sleep_until(next_at):
        try:
            receipt = client.transact("updateStageAndRound")
        except ChainError as error:
            typer.echo(f"advance failed, retrying in 1 s: {error.reason}", err=True)
            next_at = time.monotonic() + 1.0
            continue
        done += 1
        next_at += stage_seconds
        try:  # only to say where the contract is now: a failure here must not advance again
            round_, stage, *_ = client.call("roundInfo")
        except ChainError as error:
            block = receipt["blockNumber"]
            typer.echo(f"advanced (block {block}); roundInfo failed: {error.reason}", err=True)
            continue
        if not quiet or stage == 0:
            typer.echo(f"round {round_} stage {stage} (block {receipt['blockNumber']})")
