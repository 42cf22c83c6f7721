"""Node assembly: one trio nursery runs the libp2p network, the round loop (Peer), the trainer
(in a worker thread, through the Peer's offload), the coordinator client, hellos and the dashboard.

Lifecycle of `run_node`:
1. Load (or create, 0600) the identity.
2. Open the libp2p network. Pick the round clock: a chain coordinator when --chain-rpc is given;
   else the swarm schedule learned from a bootstrap peer's signed Hello; else the schedule saved
   in <data_dir>/swarm.json by an earlier run (a restarted first peer rejoins its own swarm);
   else a new swarm whose genesis is now.
3. Take the swarm's scoring rules (tasks, weights, questions per round, format reward,
   difficulty) from that schedule, overriding the local config (swarmp2p/rules.py), and load
   the trainer with them in a worker thread (torch import is slow).
4. Serve and gossip a signed Hello (schedule + listen addrs); learn peers from others' hellos.
5. Run rounds until SIGINT/SIGTERM: then ask the trainer to stop at its next step, cancel the
   nursery, save the policy, and return (a few seconds at most).

Each finished round becomes one log line and one JSON line in <data_dir>/rounds.jsonl.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from swarmp2p.config import register_config
from swarmp2p.heldout import EvalSettings, describe_deferral
from swarmp2p.heldout import describe as describe_eval
from trainer.config import user_model_cache

log = logging.getLogger("swarmp2p.node")

NODE_FILE = "node.json"
ROUNDS_FILE = "rounds.jsonl"
SWARM_FILE = "swarm.json"


def _positive(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not value > 0:
        raise ValueError(f"must be > 0, got {value!r}")


@register_config("node")
@attrs.frozen
class NodeConfig:
    """Settings of `swarmp2p node` ([node] section of the config file, or flags)."""

    data_dir: str = ".swarmp2p"
    """Identity, checkpoints, rounds.jsonl, node.json and swarm.json live here."""
    identity: str = ""
    """Identity key file; empty = <data_dir>/identity.key (created on first run, mode 0600)."""
    listen: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    bootstrap: tuple[str, ...] = ()
    """Multiaddrs (…/p2p/<peer id>) of peers to join; empty = start a new swarm."""
    round_seconds: float = attrs.field(default=30.0, validator=_positive)
    """Round length of a NEW swarm (joiners take the swarm's own from its hellos)."""
    model: str = "tiny"
    dashboard_port: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    """Port of the local dashboard (127.0.0.1); 0 = no dashboard."""
    dashboard_host: str = "127.0.0.1"
    chain_rpc: str = ""
    contract: str = ""
    eth_key: str = ""
    chain_max_fee_gwei: float = attrs.field(default=500.0, validator=_positive)
    """The most a chain transaction may pay per gas (maxFeePerGas, or a legacy gasPrice)."""
    chain_tip_cap_gwei: float = attrs.field(default=2.0, validator=attrs.validators.ge(0.0))
    """The most a chain transaction may tip per gas (maxPriorityFeePerGas)."""
    questions_per_round: int = attrs.field(default=4, validator=attrs.validators.ge(1))
    n_local: int = attrs.field(default=4, validator=attrs.validators.ge(0))
    n_external: int = attrs.field(default=4, validator=attrs.validators.ge(0))
    max_groups_per_peer: int = attrs.field(default=2, validator=attrs.validators.ge(1))
    hello_interval_s: float = attrs.field(default=5.0, validator=_positive)
    join_timeout_s: float = attrs.field(default=60.0, validator=_positive)
    fetch_timeout_s: float = attrs.field(default=5.0, validator=_positive)
    join_min_remaining: float = attrs.field(
        default=0.5, validator=[attrs.validators.ge(0.0), attrs.validators.le(1.0)]
    )
    """A node never starts a round with less than this share of its time left (its first round
    after a (re)join, or any later one it reaches late after a long step): it waits for the next
    round instead, since its batch would arrive after everyone's collect deadline. 0: never skip."""
    log_level: str = attrs.field(default="info", validator=attrs.validators.in_(("debug", "info", "warning")))
    tensorboard: str = ""
    """Folder for TensorBoard event files (one point per round: reward, loss, KL, grad norm,
    held-out accuracy; swarmp2p/tblog.py); empty = none."""
    warmup_steps: int = attrs.field(default=-1, validator=attrs.validators.ge(-1))
    """Supervised format warm-up on first start (no checkpoint yet): -1 = 15 steps for the tiny
    model and none otherwise. A fresh tiny model never writes an answer tag, so without it every
    GRPO group has zero advantage and the node would never learn."""

    def identity_path(self) -> Path:
        return Path(self.identity) if self.identity else Path(self.data_dir) / "identity.key"


class NodeError(Exception):
    """A node cannot start (bad config, unreachable bootstrap, ...). `str()` is one line."""

    exit_code = 1


class DataDirBusy(NodeError):
    """Another live process holds the data dir (swarmp2p/datadir.py): exit code 2."""

    exit_code = 2


def hello_topic(swarm_id: str) -> str:
    return f"swarmp2p/{swarm_id}/hello"


# ---- the swarm schedule -----------------------------------------------------------------------


def new_schedule(round_seconds: float, now_ms: int, rules: dict[str, Any]) -> Any:
    """A new swarm: genesis now, a fresh id and seed, and `rules` (swarmp2p.rules.rules_of_config)
    from this first peer's config. Raises NodeError when the rules break a wire bound."""
    from protocol.messages import SwarmSchedule

    schedule = SwarmSchedule(
        swarm_id=secrets.token_hex(6),
        genesis_ms=now_ms,
        round_ms=int(round_seconds * 1000),
        stage_count=1,
        seed=secrets.randbits(62),
        **rules,
    )
    _check_schedule(schedule, "the swarm rules from your config")
    return schedule


def _check_schedule(schedule: Any, source: str) -> None:
    from protocol import codec
    from protocol.errors import ProtocolError

    try:
        codec.validate(schedule)
    except ProtocolError as error:
        raise NodeError(f"{source} cannot be sent to peers: {error.message}") from None


def save_schedule(data_dir: Path, schedule: Any) -> None:
    path = data_dir / SWARM_FILE
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps(attrs.asdict(schedule)))
    os.replace(staging, path)


def load_saved_schedule(data_dir: Path) -> Any | None:
    """The schedule an earlier run saved, or None. A file from an older swarmp2p (no rules in
    it) or a damaged one is a one-line NodeError telling the user what to do."""
    from protocol.messages import SwarmSchedule

    path = data_dir / SWARM_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as error:
        raise NodeError(f"{path} is corrupt ({error}); delete it to start a new swarm") from None
    if not isinstance(data, dict):
        raise NodeError(f"{path} is corrupt (not a JSON object); delete it to start a new swarm")
    expected = [field.name for field in attrs.fields(SwarmSchedule)]
    missing = [name for name in expected if name not in data]
    unknown = sorted(set(data) - set(expected))
    if missing:
        # Written by swarmp2p before protocol 2: that swarm's peers score by their local rules
        # and speak the old protocol, so it cannot be resumed; say how to get going again.
        raise NodeError(
            f"{path} was saved by an older swarmp2p (no {', '.join(missing)}): its swarm speaks an "
            "older protocol. Delete the file to start a new swarm, or join one with --bootstrap"
        )
    if unknown:
        raise NodeError(
            f"{path} has unknown keys {', '.join(unknown)} (saved by a newer swarmp2p?); "
            "delete it to start a new swarm"
        )
    try:
        for name in ("tasks", "weights"):  # JSON has lists; the schedule holds tuples
            if isinstance(data[name], list):
                data[name] = tuple(data[name])
        schedule = SwarmSchedule(**data)
        _check_schedule(schedule, str(path))
    except (ValueError, TypeError, NodeError) as error:
        raise NodeError(f"{path} is corrupt ({error}); delete it to start a new swarm") from None
    return schedule


def _spoken_version(data: bytes) -> str:
    """The protocol version a sealed message says it speaks (envelope, else inner message)."""
    from protocol.codec import unpack_strict
    from protocol.errors import ProtocolError
    from protocol.messages import PROTOCOL_VERSION

    bounds = {"max_bin_len": 64 * 1024, "max_str_len": 64 * 1024, "max_array_len": 1024, "max_map_len": 64}
    try:
        frame = unpack_strict(data, **bounds)
        version = frame.get("v") if isinstance(frame, dict) else None
        if version == PROTOCOL_VERSION and isinstance(frame.get("m"), bytes):
            inner = unpack_strict(frame["m"], **bounds)
            version = inner.get("v") if isinstance(inner, dict) else None
    except ProtocolError:
        return "?"
    return str(version) if isinstance(version, int) and not isinstance(version, bool) else repr(version)[:20]


class VersionMismatch(ValueError):
    """A peer speaks another protocol version: nothing it sends can be understood."""


def open_hello(data: bytes, expected_signer: str | None) -> Any:
    """Verify a sealed Hello; returns it or raises ValueError with the reason (VersionMismatch,
    "peer speaks protocol N, we speak M", when the peer speaks another protocol version)."""
    from protocol.envelope import open_envelope
    from protocol.errors import ProtocolError
    from protocol.messages import PROTOCOL_VERSION, Hello

    try:
        opened = open_envelope(data, max_size=64 * 1024)
    except ProtocolError as error:
        if error.reason == "bad_version":
            raise VersionMismatch(
                f"peer speaks protocol {_spoken_version(data)}, we speak {PROTOCOL_VERSION}"
            ) from None
        raise ValueError(f"bad hello envelope: {error}") from None
    hello = opened.message
    if not isinstance(hello, Hello):
        raise ValueError(f"expected a hello, got {type(hello).__name__}")
    if expected_signer is not None and opened.signer != expected_signer:
        raise ValueError(f"hello signed by {opened.signer}, expected {expected_signer}")
    if hello.protocol_version != PROTOCOL_VERSION:
        raise VersionMismatch(f"peer speaks protocol {hello.protocol_version}, we speak {PROTOCOL_VERSION}")
    return hello


async def learn_schedule(network: Any, bootstrap: tuple[str, ...], timeout_s: float) -> Any:
    """Ask bootstrap peers for their signed Hello until one answers; returns its schedule."""
    from swarmp2p.net import HELLO_PROTOCOL, parse_peer_multiaddr
    from swarmp2p.ports import NetworkError, ProtocolRefused

    peers = [parse_peer_multiaddr(addr)[0] for addr in bootstrap]
    last_error = "no answer"
    with trio.move_on_after(timeout_s):
        while True:
            for peer_id in list(peers):
                try:
                    raw = await network.request_hello(peer_id, timeout_s=5.0)
                except ProtocolRefused:
                    # Reachable but not serving hellos: not a swarmp2p node. Final, like a version
                    # mismatch: fail now once no bootstrap peer is left.
                    peers.remove(peer_id)
                    last_error = f"bootstrap {peer_id} does not serve {HELLO_PROTOCOL}"
                    if not peers:
                        raise NodeError(f"{last_error}; is it a swarmp2p node?") from None
                    continue
                except NetworkError as error:
                    last_error = str(error)
                    continue
                if not raw:
                    last_error = f"{peer_id} has no hello yet"
                    continue
                try:
                    hello = open_hello(raw, peer_id)
                except VersionMismatch as error:
                    # Permanent: waiting will not help. Fail now once no bootstrap peer is left.
                    peers.remove(peer_id)
                    last_error = f"bootstrap {peer_id}: {error}"
                    if not peers:
                        raise NodeError(f"{last_error}; run the same swarmp2p version as the swarm") from None
                    continue
                except ValueError as error:
                    last_error = str(error)
                    continue
                network.add_known_peer(hello.peer_id, hello.listen_addrs)
                return hello.schedule
            await trio.sleep(1.0)
    raise NodeError(
        f"could not learn the swarm schedule from {', '.join(bootstrap)} in {timeout_s:.0f}s: {last_error}"
    )


# ---- the node --------------------------------------------------------------------------------


class TimedPolicy:
    """The policy as the Peer sees it, timing each call: the durations land in rounds.jsonl,
    so a slow round can be told apart from a slow network when reading a node's log."""

    def __init__(self, policy: Any) -> None:
        self._policy = policy
        self.seconds: dict[str, float] = {}

    def _timed(self, name: str, *args: Any) -> Any:
        started = time.monotonic()
        try:
            return getattr(self._policy, name)(*args)
        finally:
            self.seconds[name] = round(time.monotonic() - started, 3)

    def generate(self, questions: Any) -> Any:
        return self._timed("generate", questions)

    def train(self, groups: Any) -> Any:
        return self._timed("train", groups)

    def save(self) -> None:
        self._timed("save")

    def load(self) -> bool:
        return bool(self._timed("load"))

    def evaluate(self) -> Any:
        return self._timed("evaluate")

    def take_timings(self) -> dict[str, float]:
        taken, self.seconds = self.seconds, {}
        return taken

    def __getattr__(self, name: str) -> Any:  # registry, cancel, reset_cancel, model, ...
        return getattr(self._policy, name)


class RoundLog:
    """Turns RoundRecords into a log line and a JSON line in rounds.jsonl."""

    def __init__(
        self,
        path: Path,
        peer_id: str,
        peers: Callable[[], int],
        echo: Callable[[str], None],
        timings: Callable[[], dict[str, float]] = dict,
        network_drops: Callable[[], dict[str, int]] = dict,
        board: Any = None,
    ) -> None:
        self.board = board  # a swarmp2p.tblog.TensorBoardLog, or None
        self.path = path
        self.peer_id = peer_id
        self.peers = peers
        self.echo = echo
        self.timings = timings
        self.network_drops = network_drops

    def __call__(self, record: Any) -> None:
        data = record.to_json()
        data["peer_id"] = self.peer_id
        data["peers"] = self.peers()
        data["time_ms"] = int(time.time() * 1000)
        data["seconds"] = self.timings()  # generate / train / save durations of this round
        data["network_drops"] = self.network_drops()  # cumulative: failed dials, queue overflows, ...
        with self.path.open("a") as handle:
            handle.write(json.dumps(data, sort_keys=True) + "\n")
        if self.board is not None:
            self.board.round(data)
        reward = "n/a" if record.reward is None else f"{record.reward:.3f}"
        rejected = f"rejected {sum(record.rejected.values())}"
        out_of_round = sum(record.rejected.get(reason, 0) for reason in OUT_OF_ROUND_REJECTIONS)
        if out_of_round:
            rejected += f" ({out_of_round} out of round)"
        state = ""
        if not record.completed:
            state = " (skipped: too little time left)" if record.skipped else " (abandoned)"
        evaluation = ""
        if record.eval is not None:
            evaluation = f" | eval {describe_eval(record.eval)}"
        elif record.eval_deferred is not None:
            evaluation = f" | {describe_deferral(record.eval_deferred)}"
        self.echo(
            f"round {record.round}{state} | reward {reward} | peers {data['peers']} | "
            f"rollouts in {record.rollouts_in} out {record.rollouts_out} | "
            f"trained on {len(record.external_peers_trained_on)} peers | {rejected}{evaluation}"
        )


OUT_OF_ROUND_REJECTIONS = ("stale_round", "future_round", "late")
"""Rejections for timing, not misbehaviour (never blamed on the sender): a joiner hears the round
it missed, a slow peer announces after the deadline. The round line says how many of its
rejections these are, so that they do not read as an attack."""


def _record_check(key: str, value: bytes) -> None:
    """DHT records of the swarm are signed envelopes whose signer is the last key segment."""
    from protocol.envelope import open_envelope

    opened = open_envelope(value)  # raises ProtocolError: rejected and counted by the adapter
    owner = key.rsplit("/", 1)[-1]
    if opened.signer != owner:
        raise ValueError(f"record under {owner} signed by {opened.signer}")


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("swarmp2p").setLevel(level.upper())
    # py-libp2p logs routine transport churn (refused dials, peers without our protocols, DHT
    # misses) at WARNING/ERROR; the adapter counts what matters, so keep its voice for --log-level
    # debug. Importing it first matters: its import resets the "libp2p" logger to WARNING with no
    # handler, and Python's last-resort handler then prints every warning bare on stderr.
    import libp2p  # noqa: F401

    libp2p_logger = logging.getLogger("libp2p")
    debug = level == "debug"
    libp2p_logger.setLevel(logging.DEBUG if debug else logging.CRITICAL)
    # Debug: through the node's own handler and format. Otherwise a handler that drops everything
    # (some py-libp2p modules set their own INFO level, which the level above does not cover).
    libp2p_logger.propagate = debug
    if not debug and not any(isinstance(h, logging.NullHandler) for h in libp2p_logger.handlers):
        libp2p_logger.addHandler(logging.NullHandler())


async def run_node(
    config: NodeConfig,
    trainer_config: Any,
    *,
    echo: Callable[[str], None] = print,
    config_file: Path | None = None,
    task_status: trio.TaskStatus[dict[str, Any]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run one node until SIGINT/SIGTERM or cancellation. Raises NodeError on bad setup
    (DataDirBusy when another process holds the data dir). `config_file`: the file the config
    came from, named in the printed join command."""
    from swarmp2p.datadir import DataDirInUse, lock_data_dir

    _configure_logging(config.log_level)
    data_dir = Path(config.data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise NodeError(f"cannot create data dir {data_dir}: {error.strerror or error}") from None
    # Before anything in the dir is read or written: one process per data dir.
    try:
        dir_lock = lock_data_dir(data_dir)
    except DataDirInUse as error:
        raise DataDirBusy(str(error)) from None
    except OSError as error:
        raise NodeError(f"cannot lock data dir {data_dir}: {error.strerror or error}") from None
    try:
        await _run_locked(
            config, trainer_config, data_dir, echo=echo, config_file=config_file, task_status=task_status
        )
    finally:
        # node.json describes a running node: a stopped one leaves none (a kill -9 may leave one
        # behind; the next node on the dir removes it at start).
        (data_dir / NODE_FILE).unlink(missing_ok=True)
        dir_lock.release()


async def _run_locked(
    config: NodeConfig,
    trainer_config: Any,
    data_dir: Path,
    *,
    echo: Callable[[str], None],
    config_file: Path | None,
    task_status: trio.TaskStatus[dict[str, Any]],
) -> None:
    """run_node once it holds the data dir."""
    import multiaddr

    from swarmp2p.identity import IdentityError, load_or_create_identity
    from swarmp2p.net import NetworkSettings, open_libp2p_network, parse_peer_multiaddr
    from swarmp2p.net.listen_check import check_listen_addrs_free
    from swarmp2p.schedule import RealClock

    (data_dir / NODE_FILE).unlink(missing_ok=True)  # left by a node that was killed
    try:
        identity = load_or_create_identity(config.identity_path())
    except IdentityError as error:
        raise NodeError(str(error)) from None
    try:
        net_settings = NetworkSettings(listen=config.listen, bootstrap=config.bootstrap)
        for addr in config.bootstrap:
            parse_peer_multiaddr(addr)
        for addr in config.listen:
            multiaddr.Multiaddr(addr)
        check_listen_addrs_free(config.listen)
    except ValueError as error:
        raise NodeError(f"network settings: {error}") from None

    clock = RealClock()
    # The policy is built once the swarm's rules are known (a joiner learns them from its
    # bootstrap's hello): its task mix, format reward and even the tiny model's tokenizer follow them.
    built: list[Any] = []
    stopping = trio.Event()
    run_scope = trio.CancelScope()

    def stop(reason: str) -> None:
        if stopping.is_set():
            echo(f"{reason}: already stopping, saving state…")
            return
        echo(f"{reason}: stopping…")
        stopping.set()
        cancel = getattr(built[0], "cancel", None) if built else None
        if cancel is not None:
            cancel()  # the trainer stops at its next step, so the worker thread returns promptly
        run_scope.cancel()  # also interrupts start-up: waiting for a bootstrap, for a round start

    async def run_then_save() -> None:
        try:
            with run_scope:
                async with open_libp2p_network(identity.key_pair, net_settings) as network:
                    await _run_with_network(
                        config,
                        trainer_config,
                        identity,
                        network,
                        built,
                        clock,
                        data_dir,
                        echo,
                        stopping,
                        task_status,
                        config_file,
                    )
        finally:
            if built:
                with trio.CancelScope(shield=True):
                    await _save_policy(built[0], echo)

    try:
        async with trio.open_nursery() as guard:
            # Signals are ours from here until the model is saved: Ctrl-C during start-up, or a
            # second one while saving, must not surface as a KeyboardInterrupt traceback.
            guard.start_soon(_watch_signals, stop)
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
    echo("stopped")


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


@attrs.frozen
class SwarmSetup:
    """What a node runs with once it knows its swarm's schedule: the round loop's settings, the
    registry that scores (its own and peers' completions) and the trainer config, all following
    the swarm's rules; `notice` is the one line saying which local settings were overridden."""

    peer_settings: Any
    registry: Any
    trainer_config: Any
    notice: str | None


def swarm_setup(schedule: Any, config: NodeConfig, trainer_config: Any) -> SwarmSetup:
    """Turn the swarm's schedule (from a hello, swarm.json, or built from our own config) and the
    local config into what the node runs with. The schedule's rules win over the local config;
    the local config keeps everything that is not a rule. Raises NodeError (one line) when the
    rules name a task this installation cannot build."""
    from swarmp2p.rules import (
        differences,
        peer_settings_for,
        reasoning_gym_registry_for,
        rules_of_config,
        trainer_config_for,
    )
    from trainer.tasks import TaskError

    notice = differences(schedule, rules_of_config(trainer_config, config.questions_per_round))
    try:
        registry = reasoning_gym_registry_for(schedule)
    except TaskError as error:
        raise NodeError(f"the swarm's rules cannot be followed here: {error}") from None
    peer_settings = peer_settings_for(
        schedule,
        n_local=config.n_local,
        n_external=config.n_external,
        max_groups_per_peer=config.max_groups_per_peer,
        fetch_timeout_s=config.fetch_timeout_s,
        # One setting for both guards: the first round after a (re)join and every later one.
        min_round_remaining=config.join_min_remaining,
        evaluation=eval_settings(trainer_config),
    )
    return SwarmSetup(peer_settings, registry, trainer_config_for(schedule, trainer_config), notice)


def eval_settings(trainer_config: Any) -> EvalSettings:
    """The round loop's held-out evaluation schedule from the [trainer] eval settings (a node
    counts `eval_every` in rounds; see NODE_TRAINER_DEFAULTS for the node's own default)."""
    return EvalSettings(
        every=trainer_config.eval_every,
        before_train=trainer_config.eval_before_train,
        questions=trainer_config.eval_questions * len(trainer_config.tasks),
    )


NODE_TRAINER_DEFAULTS: dict[str, Any] = {"eval_every": 5, "model_cache": user_model_cache()}
"""[trainer] defaults of `swarmp2p node` that differ from TrainerConfig's (below the config file,
the environment and flags): a held-out evaluation every 5 rounds makes learning visible in the
round lines and on the dashboard (the trainer's own default, 0, is for `swarmp2p train`); the tiny
model is cached per user, so the nodes of one machine share one build."""


EVAL_WINDOW_SHARE = 0.4
"""About the share of a round the worker idles in one stretch (the collect window after
generating, or the rest of the round after training) on a CPU peer: what an evaluation must fit."""


def eval_fit_advice(settings: EvalSettings, seconds: float, round_s: float, per_task: int) -> str | None:
    """A line of advice when an evaluation lasting `seconds` will rarely fit into a round of
    `round_s` (so it would be deferred round after round); None when it fits."""
    window = EVAL_WINDOW_SHARE * round_s
    needed = settings.margin * seconds + settings.slack_s
    if needed <= window or seconds <= 0:
        return None
    fits = int(per_task * (window - settings.slack_s) / (settings.margin * seconds))
    fix = f"--eval-questions {fits} (per task) or " if fits >= 1 else ""
    return (
        f"held-out evaluation needs about {needed:.0f} s but a {round_s:g} s round leaves the worker "
        f"about {window:.0f} s at a stretch: it will mostly be deferred; use {fix}"
        f"--round-seconds {needed / EVAL_WINDOW_SHARE:.0f} or more for a new swarm"
    )


async def _evaluate_before_train(
    policy: Any, settings: EvalSettings, stopping: trio.Event, echo: Callable[[str], None]
) -> tuple[dict[str, Any], float] | None:
    """The held-out evaluation before the first round, run before the node joins (and before a
    new swarm's genesis), so it never eats into a round. (result, seconds) or None."""
    if not (settings.every > 0 and settings.before_train):
        return None
    echo(f"held-out evaluation before joining ({settings.questions} questions)…")
    started = time.monotonic()
    try:
        result = await trio.to_thread.run_sync(policy.evaluate)
    except Exception as error:
        if not stopping.is_set():
            echo(f"held-out evaluation failed: {error}")
        return None
    return result, time.monotonic() - started


async def _run_with_network(
    config: NodeConfig,
    trainer_config: Any,
    identity: Any,
    network: Any,
    built: list[Any],
    clock: Any,
    data_dir: Path,
    echo: Callable[[str], None],
    stopping: trio.Event,
    task_status: trio.TaskStatus[dict[str, Any]],
    config_file: Path | None = None,
) -> None:
    from protocol.envelope import seal
    from protocol.messages import PROTOCOL_VERSION, Hello
    from swarmp2p.net.checks import install_gossip_checks
    from swarmp2p.peer import Peer, announce_topic
    from swarmp2p.schedule import ScheduleCoordinator

    network.set_record_check(_record_check)
    for addr in config.bootstrap:
        try:
            await network.connect(addr)
        except Exception as error:  # upkeep keeps re-dialing pinned bootstrap peers
            echo(f"bootstrap {addr} not reachable yet: {error}")

    coordinator, schedule, new_swarm = await _coordinator(config, trainer_config, network, clock, data_dir)
    setup = await trio.to_thread.run_sync(swarm_setup, schedule, config, trainer_config)
    if setup.notice is not None:
        echo(setup.notice)
    echo(f"peer id {identity.peer_id}; loading the model ({config.model})…")
    policy = TimedPolicy(
        await trio.to_thread.run_sync(
            _build_policy, setup.trainer_config, setup.registry, config.warmup_steps, echo
        )
    )
    built.append(policy)
    if stopping.is_set():
        return  # stopped while the model loaded (a worker thread, not cancellable): start nothing
    initial_eval = await _evaluate_before_train(policy, setup.peer_settings.evaluation, stopping, echo)
    if stopping.is_set():
        return
    if new_swarm:
        # A new swarm's round 0 starts once its first peer is ready to play it: stamped before
        # the model had loaded and warmed up, round 0 was over before the peer could join it.
        schedule = attrs.evolve(schedule, genesis_ms=clock.now_ms())
        coordinator = ScheduleCoordinator(schedule, clock)
    save_schedule(data_dir, schedule)
    board = None
    if config.tensorboard:
        from swarmp2p.tblog import TensorBoardLog, TensorBoardUnavailable

        try:
            board = TensorBoardLog(config.tensorboard)
        except TensorBoardUnavailable as error:
            raise NodeError(str(error)) from None
        echo(f"tensorboard: tensorboard --logdir {config.tensorboard}")
    rounds_log = RoundLog(
        data_dir / ROUNDS_FILE,
        identity.peer_id,
        lambda: len(network.connected_peers()),
        echo,
        getattr(policy, "take_timings", dict),
        lambda: dict(network.status().get("drops", {})),
        board,
    )
    peer = Peer(
        setup.peer_settings,
        identity.seed,
        network,
        coordinator,
        policy,
        setup.registry,
        clock,
        on_round_complete=rounds_log,
    )
    peer.evaluation.tried_before_train = True  # done above (or failed, said): not again after joining
    if initial_eval is not None:
        result, seconds = initial_eval
        policy.take_timings()  # not part of the first round's timings
        recorded = peer.evaluation.record(result, None, seconds)
        echo(
            f"eval {'at start' if recorded.get('step') else 'before training'}: "
            f"{describe_eval(recorded)} on {recorded.get('questions')} "
            f"held-out questions ({seconds:.1f} s)"
        )
        advice = eval_fit_advice(
            setup.peer_settings.evaluation,
            peer.evaluation.estimate_s or seconds,
            schedule.round_ms / 1000,
            setup.trainer_config.eval_questions,
        )
        if advice:
            echo(advice)

    def current_round() -> int:
        try:
            return int(coordinator.info_at(clock.now_ms()).round)
        except Exception:  # a chain coordinator, or before genesis: what our machine knows
            return peer.machine.round

    def make_hello() -> bytes:
        hello = Hello(
            protocol_version=PROTOCOL_VERSION,
            peer_id=identity.peer_id,
            schedule=schedule,
            current_round=max(0, current_round()),
            listen_addrs=tuple(network.listen_addrs()),
            model=config.model[:64],
        )
        return seal(hello, identity.seed)

    network.set_hello(make_hello())
    hellos = await network.subscribe(hello_topic(schedule.swarm_id))
    hello_stats: dict[str, int] = {"hellos_accepted": 0, "hellos_rejected": 0}
    # Gossip that fails these checks is never relayed; stale and replayed hellos are refused.
    install_gossip_checks(
        network,
        swarm_id=schedule.swarm_id,
        hello_topic=hello_topic(schedule.swarm_id),
        announce_topic=announce_topic(schedule.swarm_id),
        current_round=current_round,
        open_hello=open_hello,
        hello_stats=hello_stats,
        max_announce_bytes=setup.peer_settings.max_announce_bytes,
    )

    def status() -> dict[str, Any]:
        snapshot = peer.status()
        # The ids, not just their count: the dashboard's "Connected peers" lists them.
        snapshot["peers"] = sorted(network.connected_peers())
        snapshot["network"] = network.status()
        snapshot["hellos"] = dict(hello_stats)
        snapshot["schedule"] = attrs.asdict(schedule)
        chain_status = getattr(coordinator, "status", None)
        if chain_status is not None:  # a chain coordinator: its submissions, also as counters
            snapshot["chain"] = chain_status()
            snapshot["counters"] = {**snapshot.get("counters", {}), **coordinator.health.counters()}
        return snapshot

    info = {
        "peer_id": identity.peer_id,
        "listen_addrs": network.listen_addrs(),
        "schedule": attrs.asdict(schedule),
        "pid": os.getpid(),
        "threads": _thread_counts(),
    }
    async with trio.open_nursery() as nursery:
        addr = network.listen_addrs()[0]
        # Say how to join before waiting for a round start: the hello is served already.
        echo(f"listening on {addr}")
        echo(
            f"swarm {schedule.swarm_id}: round {schedule.round_ms / 1000:g}s. To join from another "
            f"terminal:\n  {join_command(config, data_dir, addr, config_file)}"
        )
        if isinstance(coordinator, ScheduleCoordinator):
            await _join_at_round_start(coordinator, clock, config.join_min_remaining)
        await nursery.start(peer.run)
        nursery.start_soon(_hello_loop, network, make_hello, schedule.swarm_id, config.hello_interval_s)
        nursery.start_soon(_receive_hellos, network, hellos, hello_stats, schedule, echo)
        if config.dashboard_port:
            from swarmp2p.dashboard import serve_dashboard

            serve = functools.partial(
                serve_dashboard, status, host=config.dashboard_host, port=config.dashboard_port
            )
            info["dashboard_port"] = await nursery.start(serve)
            info["dashboard_url"] = dashboard_url(config.dashboard_host, info["dashboard_port"])
            echo(f"dashboard: {info['dashboard_url']}")
        else:
            echo("dashboard: off (--dashboard-port 8080 serves one on http://127.0.0.1:8080/)")
        node_file = data_dir / NODE_FILE
        # Atomic: tools and tests poll this file while the node starts; never show it half-written.
        staging = node_file.with_suffix(".tmp")
        staging.write_text(json.dumps(info, indent=2))
        os.replace(staging, node_file)
        task_status.started(info)
        # Run until stopped: run_node's stop() cancels the trainer and this whole scope.
        await trio.sleep_forever()


def _thread_counts() -> dict[str, Any]:
    """What this process computes with: torch's intra-op threads and the OpenMP / MKL settings."""
    import torch

    return {
        "torch": torch.get_num_threads(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
        "mkl": os.environ.get("MKL_NUM_THREADS"),
    }


def dashboard_url(host: str, port: int) -> str:
    """The URL to open for a dashboard bound to host:port (a wildcard bind: via localhost)."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def free_sibling_dir(data_dir: Path) -> Path:
    """An absolute path next to `data_dir` that does not exist yet: `<name>-2`, `<name>-3`, ..."""
    base = data_dir.resolve()
    index = 2
    while (candidate := base.with_name(f"{base.name}-{index}")).exists():
        index += 1
    return candidate


def join_command(config: NodeConfig, data_dir: Path, addr: str, config_file: Path | None = None) -> str:
    """The exact shell command that joins this node's swarm from another terminal: a real data
    dir (never a placeholder the shell would read as a redirection), this node's config file and
    model, every argument quoted for a POSIX shell; no sudo."""
    import re
    import shlex

    new_dir = free_sibling_dir(data_dir)
    args = ["swarmp2p", "node", "--data-dir", str(new_dir)]
    if config_file is not None:
        args += ["--config", str(Path(config_file).resolve())]
        # What the shared file may fix that two nodes on one machine cannot share: the identity
        # (one peer id), a fixed listen port, a dashboard port.
        if config.identity:
            args += ["--identity", str(new_dir / "identity.key")]
        if any(re.search(r"/tcp/[1-9]", addr) for addr in config.listen):
            for addr in config.listen:
                args += ["--listen", re.sub(r"/tcp/\d+", "/tcp/0", addr)]
        if config.dashboard_port:
            args += ["--dashboard-port", "0"]
    if config.model != NodeConfig().model:
        model = config.model
        if Path(model).exists():
            model = str(Path(model).resolve())
        args += ["--model", model]
    args += ["--bootstrap", addr]
    return shlex.join(args)


def _build_policy(trainer_config: Any, registry: Any, warmup_steps: int, echo: Callable[[str], None]) -> Any:
    """The trainer, resumed from its newest valid checkpoint; on a first start, warmed up and saved."""
    from trainer.model import ModelLoadError
    from trainer.policy import TrainerPolicy
    from trainer.tasks import TaskError

    def pretraining(step: int, total: int, loss: float) -> None:
        if step == 1 or step % max(1, total // 10) == 0 or step == total:
            echo(f"building the tiny model (once): pre-training step {step}/{total}, loss {loss:.3f}")

    try:
        policy = TrainerPolicy(trainer_config, registry=registry, build_progress=pretraining)
    except (ModelLoadError, TaskError) as error:
        raise NodeError(f"model: {error}") from None
    if policy.load():
        echo(f"resumed from checkpoint step {policy.step}")
        return policy
    # A pre-trained tiny model already writes the format; a raw one (tiny_pretrain_steps = 0) does not.
    raw_tiny = trainer_config.model == "tiny" and trainer_config.tiny_pretrain_steps == 0
    steps = warmup_steps if warmup_steps >= 0 else (15 if raw_tiny else 0)
    if steps:
        echo(f"first start: {steps} supervised format warm-up steps…")
        policy.warmup(steps)
        policy.save()
    return policy


async def _save_policy(policy: Any, echo: Callable[[str], None]) -> None:
    reset = getattr(policy, "reset_cancel", None)
    if reset is not None:
        reset()
    try:
        with trio.move_on_after(10):
            await trio.to_thread.run_sync(policy.save)
    except Exception as error:
        echo(f"saving the model failed: {error}")


async def _coordinator(
    config: NodeConfig, trainer_config: Any, network: Any, clock: Any, data_dir: Path
) -> tuple[Any, Any, bool]:
    """(coordinator, schedule, whether this node has just created a new swarm)."""
    from swarmp2p.peer import derive_seed
    from swarmp2p.rules import rules_of_config
    from swarmp2p.schedule import ScheduleCoordinator

    local_rules = rules_of_config(trainer_config, config.questions_per_round)

    if config.chain_rpc:
        from protocol.messages import SwarmSchedule
        from swarmp2p.chain import ChainError, open_coordinator
        from swarmp2p.chain.client import FeePolicy

        try:
            coordinator = open_coordinator(
                config.chain_rpc,
                config.contract or None,
                config.eth_key or None,
                fees=FeePolicy.from_gwei(config.chain_max_fee_gwei, config.chain_tip_cap_gwei),
                tolerant=True,  # failed submissions: counted and said once, not a warning a round
            )
        except ChainError as error:
            raise NodeError(f"chain: {error}") from None
        # On a chain the contract is the swarm: its address names it and seeds its questions.
        # The contract does not carry the scoring rules, so every peer of a chain swarm takes
        # them from its OWN config and operators must keep those identical (docs/node.md).
        contract = config.contract.lower()
        schedule = SwarmSchedule(
            swarm_id=f"chain-{contract[2:14]}",
            genesis_ms=0,
            round_ms=int(config.round_seconds * 1000),
            stage_count=1,
            seed=derive_seed("chain", contract),
            **local_rules,
        )
        _check_schedule(schedule, "the swarm rules from your config")
        return coordinator, schedule, False
    new_swarm = False
    if config.bootstrap:
        schedule = await learn_schedule(network, config.bootstrap, config.join_timeout_s)
    else:
        schedule = load_saved_schedule(data_dir)
        if schedule is None:
            schedule = new_schedule(config.round_seconds, clock.now_ms(), local_rules)
            new_swarm = True
    try:
        return ScheduleCoordinator(schedule, clock), schedule, new_swarm
    except ValueError as error:
        raise NodeError(f"unusable swarm schedule: {error}") from None


async def _join_at_round_start(coordinator: Any, clock: Any, min_remaining: float) -> None:
    """Wait for the next round when too little of the current one is left (a stop cancels it).

    The round machine joins at the CURRENT round. A node that starts it with a second to go
    publishes after every peer's collect deadline and trains alone; measured in the 5-process
    test, a rejoin 9.8 s into a 10 s round cascaded into two late rounds."""
    try:
        info = coordinator.info_at(clock.now_ms())
    except Exception:  # before genesis: the round machine waits for it anyway
        return
    stage_ms = coordinator.schedule.round_ms // coordinator.schedule.stage_count
    remaining_ms = info.stage_ends_ms - clock.now_ms()
    if remaining_ms >= min_remaining * stage_ms:
        return
    log.info("joining at round %d, in %.1fs", info.round + 1, remaining_ms / 1000)
    await trio.sleep(remaining_ms / 1000 + 0.05)


async def _watch_signals(stop: Callable[[str], None]) -> None:
    """Turn every SIGINT/SIGTERM into `stop(name)` for as long as the node runs."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            stop(signal.Signals(signum).name)


async def _hello_loop(
    network: Any, make_hello: Callable[[], bytes], swarm_id: str, interval_s: float
) -> None:
    from swarmp2p.ports import NetworkError

    topic = hello_topic(swarm_id)
    while True:
        hello = make_hello()
        network.set_hello(hello)
        try:
            await network.publish(topic, hello)
        except NetworkError as error:
            log.debug("hello publish failed: %s", error)
        await trio.sleep(interval_s)


async def _receive_hellos(
    network: Any, channel: Any, stats: dict[str, int], schedule: Any, echo: Callable[[str], None]
) -> None:
    """Learn where peers listen from their signed hellos (so nobody depends on one bootstrap), and
    say once per peer when one follows other scoring rules than ours: on a chain (the contract
    carries no rules) that is two operators' configs differing, and every batch between us
    would be rejected as forged."""
    from swarmp2p.rules import differing_rules

    warned: set[str] = set()
    async for message in channel:
        try:
            hello = open_hello(message.data, message.transport_sender)
        except ValueError as error:
            stats["hellos_rejected"] += 1
            log.debug("rejected hello from %s: %s", message.transport_sender, error)
            continue
        stats["hellos_accepted"] += 1
        network.add_known_peer(hello.peer_id, hello.listen_addrs)
        differing = differing_rules(schedule, hello.schedule)
        if differing and hello.peer_id not in warned:
            warned.add(hello.peer_id)
            stats["peers_with_other_rules"] = len(warned)
            echo(
                f"peer {hello.peer_id} follows other swarm rules ({', '.join(differing)}): "
                "its batches and ours will be rejected as forged; give every peer the same "
                "[trainer] tasks/weights/format_reward/difficulty and [node] questions_per_round"
            )
