"""What a peer keeps about a round: its working state while it runs (`RoundWork`) and the
record it leaves (`RoundRecord`, for the history, the round log, the dashboard and the
simulator's report)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from protocol.admission import RoundInbox
from protocol.game import mean_reward
from protocol.messages import QuestionGroup, QuestionRef, RolloutBatch

log = logging.getLogger("swarmp2p.peer")


FATES = {
    "completed": "",  # trained (when there was anything to train on) and reported in time
    "reported_late": "reported late",  # trained and reported, after the round's end (work in hand
    # finishes when the next round is skipped for lack of time)
    "trained_report_late": "trained, report late: not sent",  # the update ran; the next round
    # opened before the report, which is dropped (a report for a round that is over)
    "abandoned": "abandoned",  # the round ended before its training step: nothing of it was kept
    "skipped": "skipped: too little time left",  # never started (PeerSettings.min_round_remaining)
    "missed": "missed: the worker was busy with an earlier round",  # passed while our work ran
}
"""Each fate of a round, with what its round line says in brackets ("" for none)."""


def plain_fate(completed: bool, skipped: bool) -> str:
    """The fate the two flags alone tell (a late-reported round says so explicitly)."""
    return "completed" if completed else "skipped" if skipped else "abandoned"


@attrs.frozen
class RoundRecord:
    """What happened to one peer in one round (a completed round, or one abandoned midway)."""

    round: int
    stage: int
    completed: bool
    reward: float | None  # mean reward of the local completions (None if generation failed)
    rollouts_in: int  # external groups accepted (verified) this round
    rollouts_out: int  # groups this peer published
    external_peers_trained_on: tuple[str, ...]
    accepted_peers: tuple[str, ...]  # peers whose batches verified this round
    rejected: Mapping[str, int]
    opened_ms: int
    finished_ms: int
    train_metrics: Mapping[str, float] = attrs.field(factory=dict)
    skipped: bool = False  # never started: too little of it was left (PeerSettings.min_round_remaining)
    trained_local: int = 0  # local groups passed to train() this round
    trained_external: int = 0  # external groups passed to train() this round
    # Groups (ours and accepted ones) the training step left out because all their completions
    # scored alike: no advantage for GRPO. Tells "nothing to learn" from "a stage not trained".
    zero_advantage_groups: int = 0
    eval: Mapping[str, Any] | None = None  # the held-out evaluation run after this round (heldout.py)
    eval_deferred: Mapping[str, Any] | None = None  # {needed_s, left_s}: due, but did not fit
    # The batch ledger (sha256 of the sealed envelope, hex, as announced): what was published,
    # accepted and trained on, so that "no accepted batch trained twice or lost" can be checked
    # from rounds.jsonl alone (netlab/netns_harness.py `batch_ledger`).
    batch_digest: str = ""  # our own batch of this round ("" when we published none)
    accepted_batches: Mapping[str, str] = attrs.field(factory=dict)  # sender -> digest
    trained_batches: tuple[str, ...] = ()  # digests with a group in this round's training update
    untrained_batches: Mapping[str, str] = attrs.field(factory=dict)  # digest -> why not (UNTRAINED)
    ends_ms: int = 0  # the round's end as this peer had it (0: not known)
    fate: str = attrs.field(
        default=attrs.Factory(lambda record: plain_fate(record.completed, record.skipped), takes_self=True),
        validator=attrs.validators.in_(FATES),
    )
    """What became of the round (FATES): the round line and the busy-host measurement read it."""

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["rejected"] = dict(sorted(self.rejected.items()))
        data["train_metrics"] = dict(sorted(self.train_metrics.items()))
        data["external_peers_trained_on"] = list(self.external_peers_trained_on)
        data["accepted_peers"] = list(self.accepted_peers)
        data["accepted_batches"] = dict(sorted(self.accepted_batches.items()))
        data["trained_batches"] = list(self.trained_batches)
        data["untrained_batches"] = dict(sorted(self.untrained_batches.items()))
        return data


UNTRAINED = (
    "zero_advantage",  # no group of it has reward spread: GRPO learns nothing from it
    "sampled_out",  # it had such groups, the sampler took others (n_external, max_groups_per_peer)
    "banned",  # its sender was banned after it was accepted
    "train_failed",  # the training step failed (counted as train_failed)
    "round_abandoned",  # the round ended before its training step
    "not_trained",  # a completed round that trained on nothing external (a stage that is not trained)
)
"""Why an accepted batch is not in its round's training update: every accepted batch is either
trained once or has one of these reasons, never neither."""


@attrs.define
class RoundWork:
    """The runtime's working state of the round in progress; what it collected from peers
    lives in the admission inbox's `RoundInbox` (`inbox`)."""

    round: int
    stage: int
    opened_ms: int
    inbox: RoundInbox
    sweep_at_ms: int = 0
    round_ends_ms: int = 0
    questions: tuple[QuestionRef, ...] = ()
    items: tuple[Any, ...] = ()
    """A later stage's items (protocol.acr.StageItem): what `questions` name, with their inputs."""
    local: list[QuestionGroup] = attrs.Factory(list)
    batch: RolloutBatch | None = None
    rollouts_out: int = 0
    batch_digest: bytes = b""
    envelope: bytes = b""
    trained_on: tuple[str, ...] = ()
    trained_batches: tuple[str, ...] = ()  # digests (hex) of the accepted batches trained on
    untrained_batches: dict[str, str] = attrs.Factory(dict)  # digest (hex) -> reason (UNTRAINED)
    trained_local: int = 0
    trained_external: int = 0
    zero_advantage_groups: int = 0
    train_metrics: dict[str, float] = attrs.Factory(dict)
    generate_s: float | None = None
    updated: bool = False
    """The training step ran an update (the policy's train returned)."""
    train_started_ms: int | None = None
    train_finished_ms: int | None = None
    reported_ms: int | None = None
    eval: dict[str, Any] | None = None
    eval_deferred: dict[str, Any] | None = None


@functools.lru_cache(maxsize=1 << 16)
def digest_hex(digest: bytes) -> str:
    """`digest.hex()`, one string per digest while it is recent: in the simulator several peers
    accept each batch and every round record keeps its digest, and each copy cost 113 bytes
    (~1 KB a peer and round at 1000 peers, measured)."""
    return digest.hex()


def accepted_digests(inbox: RoundInbox) -> dict[str, str]:
    """Sender -> digest (hex) of the round's accepted batches. An accepted sender's announced
    digest is the accepted batch's: admission refuses a fetched batch of another digest
    (`digest_mismatch`, `sweep_conflict`) and a second announced digest (`equivocation`).
    An accepted sender with no announced digest (no path of admission does that) shows as "",
    which the ledger check reports instead of leaving the batch out."""
    announced = inbox.announced
    return {sender: digest_hex(announced.get(sender, b"")) for sender in sorted(inbox.external)}


def untrained_of(work: RoundWork, accepted: Mapping[str, str], *, completed: bool) -> dict[str, str]:
    """Why each accepted batch outside the training update was not trained: the reason the
    training step gave, else the round's (abandoned before training, or a stage not trained)."""
    fallback = "not_trained" if completed else "round_abandoned"
    trained = set(work.trained_batches)
    return {
        digest: work.untrained_batches.get(digest, fallback)
        for digest in sorted(accepted.values())
        if digest not in trained
    }


def fate_of(work: RoundWork, *, completed: bool) -> str:
    if not completed:
        return "trained_report_late" if work.updated else "abandoned"
    late = work.reported_ms is not None and 0 < work.round_ends_ms < work.reported_ms
    return "reported_late" if late else "completed"


def record_of(work: RoundWork, *, completed: bool, finished_ms: int) -> RoundRecord:
    """The record of a round that ended: reported (`completed`), or overtaken by the next
    round, which loses only the report when its training step had already run."""
    inbox = work.inbox
    accepted = accepted_digests(inbox)
    return RoundRecord(
        round=work.round,
        stage=work.stage,
        completed=completed,
        reward=mean_reward(work.local),
        rollouts_in=sum(len(groups) for groups in inbox.external.values()),
        rollouts_out=work.rollouts_out,
        external_peers_trained_on=work.trained_on,
        accepted_peers=tuple(sorted(inbox.external)),
        rejected=dict(sorted(inbox.rejected.items())),
        opened_ms=work.opened_ms,
        finished_ms=finished_ms,
        train_metrics=work.train_metrics,
        trained_local=work.trained_local,
        trained_external=work.trained_external,
        zero_advantage_groups=work.zero_advantage_groups,
        eval=work.eval,
        eval_deferred=work.eval_deferred,
        batch_digest=work.batch_digest.hex(),
        accepted_batches=accepted,
        trained_batches=work.trained_batches,
        untrained_batches=untrained_of(work, accepted, completed=completed),
        ends_ms=work.round_ends_ms,
        fate=fate_of(work, completed=completed),
    )


def skipped_record(round_number: int, stage: int, now_ms: int, fate: str = "skipped") -> RoundRecord:
    return RoundRecord(
        round=round_number,
        stage=stage,
        completed=False,
        reward=None,
        rollouts_in=0,
        rollouts_out=0,
        external_peers_trained_on=(),
        accepted_peers=(),
        rejected={},
        opened_ms=now_ms,
        finished_ms=now_ms,
        skipped=True,
        fate=fate,
    )


class RoundHistory:
    """The newest `limit` records of one peer, each also handed to `on_record` (the node's
    round log, the simulator's report); a failing callback is logged, never raised."""

    def __init__(self, peer_id: str, limit: int, on_record: Callable[[RoundRecord], None] | None) -> None:
        self.peer_id = peer_id
        self.limit = limit
        self.records: list[RoundRecord] = []
        self._on_record = on_record

    def skipped(self, round_number: int, stage: int, left_ms: int, now_ms: int) -> None:
        """The round machine left (round, stage) out: logged and recorded once."""
        log.info(
            "%s: skipping round %d: %.1fs of it left when we got to it",
            self.peer_id,
            round_number,
            left_ms / 1000,
        )
        self.add(skipped_record(round_number, stage, now_ms))

    def missed(self, first: int, last: int, busy_with: int, now_ms: int) -> None:
        """Rounds `first`..`last` began and ended while the worker was still on round `busy_with`
        (a step longer than a round): never opened, each recorded as missed."""
        log.info("%s: rounds %d-%d passed while busy with round %d", self.peer_id, first, last, busy_with)
        for round_number in range(first, last + 1):
            self.add(skipped_record(round_number, 0, now_ms, fate="missed"))

    def add(self, record: RoundRecord) -> None:
        records = self.records
        records.append(record)
        if len(records) > self.limit:
            del records[: len(records) - self.limit]
        if self._on_record is not None:
            try:
                self._on_record(record)
            except Exception:
                log.exception("%s: on_round_complete callback failed", self.peer_id)
