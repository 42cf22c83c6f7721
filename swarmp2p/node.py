"""Node assembly: one trio nursery runs the libp2p network, the round loop (Peer), the trainer
(in a worker thread, through the Peer's offload), the coordinator client, hellos and the dashboard.

`Node(config, trainer_config).run()` until `stop()` or SIGINT/SIGTERM:
1. Load (or create, 0600) the identity.
2. Open the libp2p network. Pick the round clock (node_setup.choose_coordinator): a chain
   coordinator when --chain-rpc is given; else the swarm schedule learned from a bootstrap peer's
   signed Hello (hello.py); else the schedule saved in <data_dir>/swarm.json by an earlier run
   (swarm_file.py: a restarted first peer rejoins its own swarm); else a new swarm whose genesis
   is now.
3. Take the swarm's scoring rules (tasks, weights, questions per round, format reward,
   difficulty) from that schedule, overriding the local config (swarmp2p/rules.py), and load
   the trainer with them in a worker thread (node_policy.py; torch import is slow).
4. Serve and gossip a signed Hello (schedule + listen addrs); learn peers from others' hellos.
5. Run rounds until stopped: then ask the trainer to stop at its next step, cancel the
   nursery, save the policy, and return (a few seconds at most).

Each finished round becomes one log line and one JSON line in <data_dir>/rounds.jsonl (round_log.py).

Over 400 lines: assembly only, in the order above; each step calls a module of its own
(node_setup, node_policy, hello, swarm_file, round_log, dashboard, scalar_log).
"""

from __future__ import annotations

import functools
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from swarmp2p import memory, startup_gc
from swarmp2p.heldout import describe as describe_eval
from swarmp2p.hello import OwnHello, open_hellos, publish_hellos, receive_hellos
from swarmp2p.join_command import join_lines
from swarmp2p.node_config import NODE_TRAINER_DEFAULTS, DataDirBusy, NodeConfig, NodeError
from swarmp2p.node_logging import configure_logging, thread_counts
from swarmp2p.node_policy import build_policy, save_policy, start_point
from swarmp2p.node_setup import (
    SwarmSetup,
    choose_coordinator,
    join_at_round_start,
    network_settings,
    record_check,
    swarm_setup,
)
from swarmp2p.round_log import ROUNDS_FILE, RoundLog, TimedPolicy
from swarmp2p.swarm_file import save_schedule

if TYPE_CHECKING:
    from swarmp2p.identity import Identity
    from swarmp2p.net.adapter import LibP2PNetwork
    from swarmp2p.peer import Peer
    from swarmp2p.ports import Clock, CoordinatorPort

__all__ = ["NODE_FILE", "NODE_TRAINER_DEFAULTS", "DataDirBusy", "Node", "NodeConfig", "NodeError", "run_node"]

NODE_FILE = "node.json"


async def run_node(
    config: NodeConfig,
    trainer_config: Any,
    *,
    echo: Callable[[str], None] = print,
    config_file: Path | None = None,
    task_status: trio.TaskStatus[dict[str, Any]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run one node until SIGINT/SIGTERM or cancellation (see `Node`): what `swarmp2p node` calls."""
    await Node(config, trainer_config, echo=echo, config_file=config_file).run(task_status=task_status)


class Node:
    """One swarm peer. `await node.run()` runs it until `node.stop()`, SIGINT/SIGTERM or
    cancellation; raises NodeError on bad setup (DataDirBusy when another process holds the data
    dir). `config_file`: the file the config came from, named in the printed join command."""

    def __init__(
        self,
        config: NodeConfig,
        trainer_config: Any,
        *,
        echo: Callable[[str], None] = print,
        config_file: Path | None = None,
    ) -> None:
        self.config = config
        self.trainer_config = trainer_config
        self.echo = echo
        self.config_file = config_file
        self.data_dir = Path(config.data_dir)
        self.device = ""
        """The device the trainer runs on, described (trainer.device.describe), once checked."""
        self.policy: TimedPolicy | None = None
        """Set once the trainer is built (a stop asks it to cancel; the way out saves it)."""
        self.board: Any = None
        """The scalar log (--tensorboard / --wandb) once opened; closed on the way out."""
        self._stopping = trio.Event()
        self._run_scope = trio.CancelScope()
        self.phase = "starting"
        """Where start-up is: starting (network, coordinator, swarm rules), loading (the model),
        joining (waiting for a round start), playing. `/healthz`, `/api/status` and `/metrics`
        say it from the moment the network is up, and `evaluating` while the node plays and its
        first held-out evaluation is still answered in slices (`_phase`)."""
        self._status: Callable[[], dict[str, Any]] | None = None  # the full status, once playing
        self._dashboard_refresh: Callable[[], None] | None = None  # publish a status snapshot now

    def stop(self, reason: str = "stop requested") -> None:
        """Stop the node (from its own trio run): the trainer stops at its next step, start-up
        waits (a bootstrap, a round start) end, and `run()` saves the policy and returns."""
        if self._stopping.is_set():
            self.echo(f"{reason}: already stopping, saving state…")
            return
        self.echo(f"{reason}: stopping…")
        self._stopping.set()
        if self.policy is not None:
            self.policy.cancel()  # the trainer stops at its next step, so the worker thread returns promptly
        self._run_scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[dict[str, Any]] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until stopped. `task_status.started` gets what node.json holds (peer id, listen
        addrs, schedule, pid, dashboard URL) once the node serves its hello and plays rounds."""
        from swarmp2p.datadir import DataDirInUse, lock_data_dir

        configure_logging(self.config.log_level)
        from swarmp2p.model_auto import choose_hardware
        from swarmp2p.model_source import ModelUnreachable, check_model_reachable
        from trainer.device import DeviceError

        try:  # the device checked (and --model auto picked) before anything starts
            hardware = await trio.to_thread.run_sync(choose_hardware, self.config, self.trainer_config)
        except DeviceError as error:
            raise NodeError(f"--device: {error}") from None
        self.config, self.trainer_config = hardware.config, hardware.trainer_config
        self.device = hardware.device
        if hardware.auto_line:
            self.echo(hardware.auto_line)

        try:  # seconds, not transformers' minute of retries, for a hub id with no network
            await trio.to_thread.run_sync(check_model_reachable, self.config.model)
        except ModelUnreachable as error:
            raise NodeError(str(error)) from None
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise NodeError(f"cannot create data dir {self.data_dir}: {error.strerror or error}") from None
        # Before anything in the dir is read or written: one process per data dir.
        try:
            dir_lock = lock_data_dir(self.data_dir)
        except DataDirInUse as error:
            raise DataDirBusy(str(error)) from None
        except OSError as error:
            raise NodeError(f"cannot lock data dir {self.data_dir}: {error.strerror or error}") from None
        try:
            await self._run_locked(task_status)
        finally:
            # node.json describes a running node: a stopped one leaves none (a kill -9 may leave one
            # behind; the next node on the dir removes it at start).
            (self.data_dir / NODE_FILE).unlink(missing_ok=True)
            dir_lock.release()

    async def _run_locked(self, task_status: trio.TaskStatus[dict[str, Any]]) -> None:
        """`run` once it holds the data dir."""
        from swarmp2p.identity import IdentityError, load_or_create_identity
        from swarmp2p.net import open_libp2p_network

        (self.data_dir / NODE_FILE).unlink(missing_ok=True)  # left by a node that was killed
        try:
            identity = load_or_create_identity(self.config.identity_path())
        except IdentityError as error:
            raise NodeError(str(error)) from None
        net_settings = network_settings(self.config)

        async def run_then_save() -> None:
            try:
                with self._run_scope:
                    async with open_libp2p_network(identity.key_pair, net_settings) as network:
                        await self._run_with_network(identity, network, task_status)
            finally:
                if self.policy is not None:
                    with trio.CancelScope(shield=True):
                        await save_policy(self.policy, self.echo)
                if self.board is not None:
                    self.board.close()  # a W&B run is finished, not left for its atexit hook

        try:
            async with trio.open_nursery() as guard:
                # Signals are ours from here until the model is saved: Ctrl-C during start-up, or a
                # second one while saving, must not surface as a KeyboardInterrupt traceback.
                guard.start_soon(_watch_signals, self.stop)
                try:
                    await run_then_save()
                finally:
                    guard.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # A NodeError raised inside a nursery (bad swarm.json, a bootstrap speaking another
            # protocol, ...) arrives wrapped; the CLI must still print it as one line.
            node_errors, rest = group.split(NodeError)
            if node_errors is None or rest is not None:
                raise
            raise _first_leaf(node_errors) from None
        self.echo("stopped")

    async def _run_with_network(
        self, identity: Identity, network: LibP2PNetwork, task_status: trio.TaskStatus[dict[str, Any]]
    ) -> None:
        from swarmp2p.clocks import RealClock

        clock = RealClock()
        network.set_record_check(record_check)
        async with trio.open_nursery() as nursery:
            # Served before the model loads (a minute on a busy host): a supervisor or a browser
            # must see a node that is starting, not a dead one.
            dashboard_port = await self._serve_dashboard(nursery, identity, network)
            try:
                await self._start_and_play(identity, network, clock, nursery, dashboard_port, task_status)
            finally:
                nursery.cancel_scope.cancel()  # stopped during start-up: the dashboard goes too

    async def _serve_dashboard(
        self, nursery: trio.Nursery, identity: Identity, network: LibP2PNetwork
    ) -> int | None:
        """Start the dashboard (when asked) on the node's status: a start-up one (peer id, phase,
        network) until the round loop runs, then the round loop's. Returns its port."""
        config = self.config
        if not config.dashboard_port:
            self.echo("dashboard: off (--dashboard-port 8080 serves one on http://127.0.0.1:8080/)")
            return None

        def status() -> dict[str, Any]:
            full = self._status
            if full is not None:
                return full()
            return {
                "peer_id": identity.peer_id,
                "phase": self.phase,
                "node_phase": self.phase,
                "peers": sorted(network.connected_peers()),
                "network": network.status(),
            }

        from swarmp2p.dashboard.snapshot import StatusPublisher
        from swarmp2p.dashboard.thread_server import serve_dashboard_in_thread

        # Built here on the trio thread every 0.5 s and at each round's end, served from its own
        # thread: a request never waits behind the node's work (a gossip flood, a long step).
        publisher = StatusPublisher(status)
        await nursery.start(publisher.run)
        self._dashboard_refresh = publisher.refresh
        serve = functools.partial(
            serve_dashboard_in_thread,
            publisher.status,
            host=config.dashboard_host,
            port=config.dashboard_port,
            history_file=self.data_dir / ROUNDS_FILE,  # every round, not only since this start
        )
        port: int = await nursery.start(serve)
        self.echo(f"dashboard: {dashboard_url(config.dashboard_host, port)}")
        return port

    async def _start_and_play(
        self,
        identity: Identity,
        network: LibP2PNetwork,
        clock: Any,
        nursery: trio.Nursery,
        dashboard_port: int | None,
        task_status: trio.TaskStatus[dict[str, Any]],
    ) -> None:
        """Choose the round clock, load the model, evaluate, join and play until stopped."""
        from swarmp2p.schedule import ScheduleCoordinator

        config, echo = self.config, self.echo
        for addr in config.bootstrap:
            try:
                await network.connect(addr)
            except Exception as error:  # upkeep keeps re-dialing pinned bootstrap peers
                echo(f"bootstrap {addr} not reachable yet: {error}")

        coordinator, schedule, new_swarm, chain = await choose_coordinator(
            config, self.trainer_config, network=network, clock=clock, data_dir=self.data_dir
        )
        bootnodes = None
        if chain is not None:  # the contract's bootnode list: peers without --bootstrap
            from swarmp2p.contract_peers import ContractBootnodes

            bootnodes = ContractBootnodes(chain, network, dial=not config.bootstrap, echo=echo)
            await bootnodes.sync()
        # The policy is built once the swarm's rules are known (a joiner learns them from its
        # bootstrap's hello): its task mix, format reward and even the tiny model's tokenizer follow them.
        setup = await trio.to_thread.run_sync(swarm_setup, schedule, config, self.trainer_config)
        if setup.notice is not None:
            echo(setup.notice)
        echo(f"peer id {identity.peer_id}; loading the model ({config.model}) on {self.device}…")
        self.phase = "loading"
        built = functools.partial(
            build_policy,
            setup.trainer_config,
            registry=setup.registry,
            warmup_steps=config.warmup_steps,
            echo=echo,
        )
        policy = self.policy = TimedPolicy(await trio.to_thread.run_sync(built))
        if self._stopping.is_set():
            return  # stopped while the model loaded (a worker thread, not cancellable): start nothing
        # Remembered or not, the start point never holds the node up: without a stored result it
        # is answered in slices while the node plays (swarmp2p/heldout.py).
        initial_eval = await start_point(policy, setup.peer_settings.evaluation, echo)
        self.phase = "joining"
        if self._stopping.is_set():
            return
        if new_swarm:
            # A new swarm's round 0 starts once its first peer is ready to play it: stamped before
            # the model had loaded and warmed up, round 0 was over before the peer could join it.
            schedule = attrs.evolve(schedule, genesis_ms=clock.now_ms())
            coordinator = ScheduleCoordinator(schedule, clock)
        save_schedule(self.data_dir, schedule)
        peer = self._make_peer(
            identity=identity, network=network, coordinator=coordinator, clock=clock, setup=setup
        )
        if initial_eval is not None:
            peer.evaluation.tried_before_train = True
            self._report_initial_eval(peer, initial_eval)

        def current_round() -> int:
            try:
                return int(coordinator.info_at(clock.now_ms()).round)
            except Exception:  # a chain coordinator, or before genesis: what our machine knows
                return peer.machine.round

        own_hello = OwnHello(
            identity=identity,
            network=network,
            schedule=schedule,
            model=config.model,
            current_round=current_round,
        )
        hellos, hello_stats = await open_hellos(
            network,
            own_hello,
            swarm_id=schedule.swarm_id,
            current_round=current_round,
            max_announce_bytes=setup.peer_settings.max_announce_bytes,
        )

        from swarmp2p.dashboard.feed import RolloutFeed, peer_faults

        feed = RolloutFeed()
        chain_board = None
        if chain is not None:  # on a chain: the contract's table
            from swarmp2p.dashboard.chain_board import ChainLeaderboard

            chain_board = ChainLeaderboard()

        def status() -> dict[str, Any]:
            snapshot = peer.status()
            snapshot["node_phase"] = _phase(self.phase, peer)
            snapshot["rollouts"] = feed.observe(peer.current_work, identity.peer_id)
            snapshot["peer_rewards"] = feed.peer_rewards()  # the leaderboard's rewards of others
            snapshot["peer_rejections"] = peer_faults(peer)  # per peer: messages blamed on it
            # The ids, not just their count: the dashboard's "Connected peers" lists them.
            snapshot["peers"] = sorted(network.connected_peers())
            snapshot["network"] = network.status()
            snapshot["hellos"] = dict(hello_stats)
            snapshot["schedule"] = attrs.asdict(schedule)
            if chain is not None:  # a chain coordinator: its submissions, also as counters
                snapshot["chain"] = chain.status()
                snapshot["counters"] = {**snapshot.get("counters", {}), **chain.health.counters()}
            if chain_board is not None:
                chain_board.apply(snapshot)
            return snapshot

        info = {
            "peer_id": identity.peer_id,
            "listen_addrs": network.listen_addrs(),
            "schedule": attrs.asdict(schedule),
            "pid": os.getpid(),
            "threads": thread_counts(),
        }
        addr = network.listen_addrs()[0]
        # Say how to join before waiting for a round start: the hello is served already.
        echo(f"listening on {addr}")
        joining = join_lines(config, self.data_dir, addr, self.config_file)
        echo(
            f"swarm {schedule.swarm_id}: round {schedule.round_ms / 1000:g}s. To join from another "
            "terminal:\n  " + "\n  ".join(joining)
        )
        if isinstance(coordinator, ScheduleCoordinator):
            await join_at_round_start(coordinator, clock, config.join_min_remaining)
        await nursery.start(peer.run)
        self.phase = "playing"
        self._status = status
        self._refresh_dashboard()
        # Free heap pages left by bursts (big DHT records, floods) go back to the system.
        nursery.start_soon(memory.give_back_periodically)
        nursery.start_soon(publish_hellos, network, own_hello, schedule.swarm_id, config.hello_interval_s)
        nursery.start_soon(receive_hellos, network, hellos, hello_stats, schedule, echo)
        if bootnodes is not None:
            nursery.start_soon(bootnodes.watch)
        if chain_board is not None and dashboard_port is not None:
            nursery.start_soon(chain_board.watch, chain, max(5.0, schedule.round_ms / 2000))
        if dashboard_port is not None:
            info["dashboard_port"] = dashboard_port
            info["dashboard_url"] = dashboard_url(config.dashboard_host, dashboard_port)
        # A round's own line comes once it is trained and reported, most of a round later: say
        # at once that the node plays (the moment a user waits for after the address).
        echo(f"round {current_round()} started: playing (one line per round as each ends)")
        startup_gc.resume_full_collections()  # deferred by `swarmp2p node` while it started
        self._write_node_file(info)
        task_status.started(info)
        # Run until stopped: stop() cancels the trainer and this whole scope.
        await trio.sleep_forever()

    def _make_peer(
        self,
        *,
        identity: Identity,
        network: LibP2PNetwork,
        coordinator: CoordinatorPort,
        clock: Clock,
        setup: SwarmSetup,
    ) -> Peer:
        """The round loop, logging each finished round (and to TensorBoard when asked)."""
        from swarmp2p.peer import Peer

        policy = self.policy
        assert policy is not None
        rounds_log = RoundLog(
            self.data_dir / ROUNDS_FILE,
            identity.peer_id,
            network.connected_peers,
            self.echo,
            timings=policy.take_timings,
            network_drops=lambda: dict(network.status().get("drops", {})),
            board=self._open_scalar_log(),
        )
        return Peer(
            settings=setup.peer_settings,
            signing_seed=identity.seed,
            network=network,
            coordinator=coordinator,
            policy=policy,
            registry=setup.registry,
            clock=clock,
            on_round_complete=self._after_round(rounds_log),
            stopping=self._stopping.is_set,
        )

    def _refresh_dashboard(self) -> None:
        if self._dashboard_refresh is not None:
            self._dashboard_refresh()

    def _after_round(self, rounds_log: Callable[[Any], None]) -> Callable[[Any], None]:
        """The round's record logged, then the dashboard's snapshot rebuilt: it shows the round
        as soon as its line is printed, not up to a cadence later."""

        def logged(record: Any) -> None:
            try:
                rounds_log(record)
            finally:
                self._refresh_dashboard()

        return logged

    def _open_scalar_log(self) -> Any:
        """The scalar log for --tensorboard and/or --wandb (swarmp2p/scalar_log.py), else None."""
        from swarmp2p.scalar_log import ScalarLogUnavailable
        from swarmp2p.scalar_writers import open_scalar_log

        try:
            self.board = open_scalar_log(
                tensorboard=self.config.tensorboard,
                wandb=self.config.wandb,
                name=f"node-{self.data_dir.name}",
                job_type="node",
                config={"node": attrs.asdict(self.config)},
            )
        except ScalarLogUnavailable as error:
            raise NodeError(str(error)) from None
        if self.config.tensorboard:
            self.echo(f"tensorboard: tensorboard --logdir {self.config.tensorboard}")
        if self.config.wandb:
            self.echo(f"wandb: offline run in {Path(self.config.wandb) / 'wandb'} (upload later: wandb sync)")
        return self.board

    def _report_initial_eval(self, peer: Peer, initial_eval: tuple[dict[str, Any], float]) -> None:
        """Record the remembered evaluation of the start weights as the peer's first."""
        assert self.policy is not None
        result, seconds = initial_eval
        self.policy.take_timings()  # not part of the first round's timings
        recorded = peer.evaluation.record(result, None, seconds)
        took = f"{seconds:.1f} s"
        if result.get("remembered"):  # these weights on these questions before: no new answers
            took = f"remembered: evaluated before in {result.get('seconds', 0.0):.1f} s"
        self.echo(
            f"eval {'at start' if recorded.get('step') else 'before training'}: "
            f"{describe_eval(recorded)} on {recorded.get('questions')} held-out questions ({took})"
        )

    def _write_node_file(self, info: dict[str, Any]) -> None:
        node_file = self.data_dir / NODE_FILE
        # Atomic: tools and tests poll this file while the node starts; never show it half-written.
        staging = node_file.with_suffix(".tmp")
        staging.write_text(json.dumps(info, indent=2))
        os.replace(staging, node_file)


async def _watch_signals(stop: Callable[[str], None]) -> None:
    """Turn every SIGINT/SIGTERM into `stop(name)` for as long as the node runs."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            stop(signal.Signals(signum).name)


def _phase(phase: str, peer: Peer) -> str:
    """The node's phase as `/healthz` says it: `evaluating` while it plays and its first held-out
    evaluation (the start point) is still being answered in slices."""
    evaluation = peer.evaluation
    answering = evaluation.in_progress or evaluation.sliced_due()
    if phase == "playing" and evaluation.first is None and answering:
        return "evaluating"
    return phase


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def dashboard_url(host: str, port: int) -> str:
    """The URL to open for a dashboard bound to host:port (a wildcard bind: via localhost)."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"
