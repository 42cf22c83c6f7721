"""What a node runs with once it knows its swarm: the round clock (a chain, or the swarm's
schedule), the swarm's rules turned into the round loop's settings and the trainer's config, and
the wait for a round with enough time left to join."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from protocol.games import SINGLE
from swarmp2p.hello import learn_schedule
from swarmp2p.node_config import NodeConfig, NodeError
from swarmp2p.node_policy import eval_settings
from swarmp2p.swarm_file import check_schedule, load_saved_schedule, new_schedule

if TYPE_CHECKING:
    from swarmp2p.chain.coordinator import ChainCoordinator
    from swarmp2p.ports import CoordinatorPort

log = logging.getLogger("swarmp2p.node")


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
    try:
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
    except ValueError as error:  # a game this installation lacks, or stages that are not its own
        raise NodeError(f"the swarm cannot be joined with these settings: {error}") from None
    return SwarmSetup(peer_settings, registry, trainer_config_for(schedule, trainer_config), notice)


async def choose_coordinator(
    config: NodeConfig, trainer_config: Any, *, network: Any, clock: Any, data_dir: Path
) -> tuple[CoordinatorPort, Any, bool, ChainCoordinator | None]:
    """(coordinator, schedule, whether this node has just created a new swarm, the chain
    coordinator or None). The round clock is a chain when --chain-rpc is given (then the same
    object comes back last too: its status, submission health and leaderboard are the
    dashboard's); else the schedule learned from a bootstrap's hello; else the one saved in
    swarm.json by an earlier run; else a new swarm's."""
    from protocol.seeds import derive_seed
    from swarmp2p.rules import rules_of_config
    from swarmp2p.schedule import ScheduleCoordinator

    local_rules = rules_of_config(trainer_config, config.questions_per_round)

    if config.chain_rpc:
        from protocol.messages import SwarmSchedule

        if config.game != SINGLE:  # the contract's stages are its own; the game is not carried
            raise NodeError(f"--game {config.game} needs a chain-less swarm (no --chain-rpc)")
        from swarmp2p.chain import ChainError
        from swarmp2p.chain import open_coordinator as open_chain_coordinator
        from swarmp2p.chain.client import FeePolicy

        try:
            coordinator = open_chain_coordinator(
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
            round_ms=await _chain_round_ms(coordinator, config.round_seconds),
            stage_count=1,
            seed=derive_seed("chain", contract),
            **local_rules,
        )
        check_schedule(schedule, "the swarm rules from your config")
        return coordinator, schedule, False, coordinator
    new_swarm = False
    if config.bootstrap:
        schedule = await learn_schedule(network, config.bootstrap, config.join_timeout_s)
    else:
        schedule = load_saved_schedule(data_dir)
        if schedule is None:
            schedule = new_schedule(config.round_seconds, clock.now_ms(), local_rules, config.game)
            new_swarm = True
    try:
        return ScheduleCoordinator(schedule, clock), schedule, new_swarm, None
    except ValueError as error:
        raise NodeError(f"unusable swarm schedule: {error}") from None


async def _chain_round_ms(coordinator: ChainCoordinator, round_seconds: float) -> int:
    """The round length the contract publishes (stageDuration x stageCount), which its stage
    manager is expected to keep; --round-seconds only when it publishes none or cannot be read
    yet (a chain down at start is not fatal: the round loop retries). It sizes what a round
    length sizes: the printed round, the evaluation-fit advice, the leaderboard's refresh."""
    from swarmp2p.ports import CoordinatorError

    fallback = int(round_seconds * 1000)
    try:
        info = await coordinator.current()
    except CoordinatorError as error:
        log.warning("chain: no stage duration (%s); rounds of %gs assumed", error.reason, round_seconds)
        return fallback
    if info.stage_ms <= 0:
        log.info("chain: the contract publishes no stage duration; rounds of %gs assumed", round_seconds)
        return fallback
    return info.stage_ms * max(1, info.stage_count)


async def join_at_round_start(coordinator: Any, clock: Any, min_remaining: float) -> None:
    """Wait for the next round when too little of the current one is left (a stop cancels it).

    The round machine joins at the CURRENT round. A node that starts it with a second to go
    publishes after every peer's collect deadline and trains alone; measured in the 5-process
    test, a rejoin 9.8 s into a 10 s round cascaded into two late rounds."""
    try:
        info = coordinator.info_at(clock.now_ms())
    except Exception:  # before genesis: the round machine waits for it anyway
        return
    stage_ms = coordinator.stages.stage_ms
    remaining_ms = info.stage_ends_ms - clock.now_ms()
    if remaining_ms >= min_remaining * stage_ms:
        return
    log.info("joining at round %d, in %.1fs", info.round + 1, remaining_ms / 1000)
    await trio.sleep(remaining_ms / 1000 + 0.05)


def network_settings(config: NodeConfig) -> Any:
    """The libp2p settings, every address checked first: a bad one is a one-line NodeError."""
    import multiaddr

    from swarmp2p.net import NetworkSettings, parse_peer_multiaddr
    from swarmp2p.net.listen_check import check_listen_addrs_free

    try:
        net_settings = NetworkSettings(
            listen=config.listen, bootstrap=config.bootstrap, relay_backup_copy=config.relay_backup_copy
        )
        for addr in config.bootstrap:
            parse_peer_multiaddr(addr)
        for addr in config.listen:
            multiaddr.Multiaddr(addr)
        check_listen_addrs_free(config.listen)
    except ValueError as error:
        raise NodeError(f"network settings: {error}") from None
    return net_settings


def record_check(key: str, value: bytes) -> None:
    """DHT records of the swarm are signed envelopes whose signer is the last key segment."""
    from protocol.envelope import open_envelope

    opened = open_envelope(value)  # raises ProtocolError: rejected and counted by the adapter
    owner = key.rsplit("/", 1)[-1]
    if opened.signer != owner:
        raise ValueError(f"record under {owner} signed by {opened.signer}")
