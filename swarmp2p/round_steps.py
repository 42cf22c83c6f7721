"""The work of one round's steps, through the policy and coordinator ports: generate and seal
the local batch, sample and train, report reward and winners. The Peer (swarmp2p/peer.py)
decides when each runs (its round machine says so) and feeds the machine the outcome.

Failures of our own policy or coordinator are counted and logged, never raised: a failed
generation leaves the round to be abandoned by the next one, a failed training step still
finishes the round, a failed report is only counted.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from protocol.envelope import seal
from protocol.game import Game, mean_reward, rank_winners
from protocol.messages import QuestionGroup, RolloutBatch
from protocol.sampling import (
    SampledGroups,
    SamplingState,
    has_advantage,
    observe_round,
    sample_training_groups,
)
from protocol.seeds import derive_seed
from protocol.stage_inputs import InputStore
from swarmp2p.peer_settings import PeerSettings
from swarmp2p.ports import CoordinatorError, CoordinatorPort, PolicyPort
from swarmp2p.round_record import RoundWork, accepted_digests

log = logging.getLogger("swarmp2p.peer")

Offload = Callable[..., Awaitable[Any]]
"""`await offload(sync_fn, *args)` runs `sync_fn(*args)` somewhere and returns its result."""


def thread_offload() -> Offload:
    """The real node's offload: one worker thread at a time (the trainer is not re-entrant)."""
    limiter = trio.CapacityLimiter(1)

    async def offload(fn: Callable[..., Any], *args: Any) -> Any:
        return await trio.to_thread.run_sync(functools.partial(fn, *args), limiter=limiter)

    return offload


def stopping() -> bool:
    """True inside a cancelled scope, i.e. while the node stops. A policy call that fails then
    was told to stop (TrainerPolicy.cancel raises out of generate/train): not a fault to report."""
    return trio.current_effective_deadline() == -math.inf


def stage_questions(
    work: RoundWork, game: Game, peer_id: str, store: InputStore, counters: Counter[str]
) -> bool:
    """Set what `work` answers: derived questions, or for a later stage of a multi-stage game
    items built from the previous stage's batches in `store` (`work.items`; their wire
    questions in `work.questions`). False: a later stage with nothing to build on."""
    if not game.builds_on_inputs(work.stage):
        work.questions = game.questions(work.round, work.stage, peer_id)
        return True
    work.items = game.items(work.round, work.stage, peer_id, store)
    work.questions = tuple(item.ref for item in work.items)
    if not work.items:
        counters["stage_without_inputs"] += 1
    return bool(work.items)


async def generate(
    work: RoundWork,
    *,
    settings: PeerSettings,
    peer_id: str,
    signing_seed: bytes,
    policy: PolicyPort,
    offload: Offload,
    now_ms: Callable[[], int],
    counters: Counter[str],
) -> bool:
    """Answer `work.questions` and seal the batch into `work`. False: nothing to publish."""
    try:
        started_ms = now_ms()
        if work.items:  # a later stage of a multi-stage game: items, not bare questions
            groups = list(await offload(policy.generate_items, work.items))
        else:
            groups = list(await offload(policy.generate, work.questions))
        work.generate_s = (now_ms() - started_ms) / 1000
        batch = RolloutBatch(
            swarm_id=settings.swarm_id,
            round=work.round,
            stage=work.stage,
            peer_id=peer_id,
            groups=tuple(groups),
        )
        envelope = seal(batch, signing_seed)
    except Exception:
        if stopping():
            log.debug("%s: generation stopped with the node in round %d", peer_id, work.round)
            return False
        # Our own policy failed: the round is skipped (the next RoundOpened abandons it).
        log.exception("%s: generation failed in round %d", peer_id, work.round)
        counters["generate_failed"] += 1
        return False
    work.local = groups
    work.batch = batch
    work.envelope = envelope
    work.batch_digest = hashlib.sha256(envelope).digest()
    return True


async def train(
    work: RoundWork,
    external: dict[str, tuple[QuestionGroup, ...]],
    sampling_state: SamplingState,
    *,
    settings: PeerSettings,
    peer_id: str,
    policy: PolicyPort,
    offload: Offload,
    counters: Counter[str],
    local: Sequence[QuestionGroup] | None = None,
) -> tuple[SamplingState, bool]:
    """Sample the round's training groups from `local` (default `work.local`; the game's
    training view of it) and `external`, train, save. Returns the sampling rule's new state
    and False when the node stopped midway."""
    round_number = work.round
    own = work.local if local is None else list(local)
    sampled = sample_training_groups(
        own,
        external,
        n_local=settings.n_local,
        n_external=settings.n_external,
        max_per_peer=settings.max_groups_per_peer,
        seed=derive_seed(settings.seed, round_number, peer_id, "sample"),
        rule=settings.sampling,
        state=sampling_state,
    )
    sampling_state = observe_round(
        settings.sampling,
        sampling_state,
        own,
        external,
        round_number=round_number,
        n_local=settings.n_local,
        n_external=settings.n_external,
    )
    groups = [*sampled.local, *(group for _, group in sampled.external)]
    work.trained_on = tuple(sorted({peer for peer, _ in sampled.external}))
    work.trained_batches, work.untrained_batches = batch_ledger(work, external, sampled)
    work.trained_local, work.trained_external = len(sampled.local), len(sampled.external)
    work.zero_advantage_groups = sampled.dropped_zero_advantage
    counters["dropped_zero_advantage"] += sampled.dropped_zero_advantage
    if groups:
        try:
            metrics = await offload(policy.train, groups)
            work.train_metrics = {str(k): float(v) for k, v in dict(metrics or {}).items()}
            work.updated = True
            counters["trained"] += 1
        except Exception:
            if stopping():
                log.debug("%s: training stopped with the node in round %d", peer_id, round_number)
                return sampling_state, False
            log.exception("%s: training failed in round %d", peer_id, round_number)
            counters["train_failed"] += 1
            failed = {digest: "train_failed" for digest in work.trained_batches}
            work.untrained_batches = {**work.untrained_batches, **failed}
            work.trained_batches = ()
            work.trained_on = ()
            work.trained_local = work.trained_external = 0
        try:
            await offload(policy.save)
        except Exception:
            log.exception("%s: checkpoint save failed", peer_id)
            counters["save_failed"] += 1
    return sampling_state, True


def batch_ledger(
    work: RoundWork, pool: dict[str, tuple[QuestionGroup, ...]], sampled: SampledGroups
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The digests of the accepted batches with a group in this training update, and why each
    other accepted batch has none (round_record.UNTRAINED): the round record's ledger."""
    digests = accepted_digests(work.inbox)
    taken = {peer for peer, _ in sampled.external}
    trained = tuple(sorted(digests[peer] for peer in taken if peer in digests))
    untrained: dict[str, str] = {}
    for peer, digest in digests.items():
        if peer in taken:
            continue
        if peer not in pool:
            untrained[digest] = "banned"  # banned since it was accepted: not in the training pool
        elif any(has_advantage(group) for group in pool[peer]):
            untrained[digest] = "sampled_out"
        else:
            untrained[digest] = "zero_advantage"
    return trained, untrained


async def report(
    work: RoundWork,
    *,
    peer_id: str,
    winners_count: int,
    coordinator: CoordinatorPort,
    counters: Counter[str],
) -> None:
    """Submit our mean reward and the round's winners (us and the peers we accepted)."""
    reward = mean_reward(work.local)
    ranking = dict(work.inbox.external_reward)
    if reward is not None:
        ranking[peer_id] = reward
    winners = rank_winners(ranking, winners_count)
    try:
        if reward is not None:
            await coordinator.submit_reward(work.round, work.stage, reward, peer_id)
        if winners:
            await coordinator.submit_winners(work.round, winners, peer_id)
    except CoordinatorError as error:
        log.warning("%s: report failed: %s", peer_id, error.reason)
        counters["report_failed"] += 1
    except Exception:
        log.exception("%s: report failed", peer_id)
        counters["report_failed"] += 1
