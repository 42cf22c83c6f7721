"""The admission inbox's vocabulary: the fetch job and the decisions `protocol.admission.Inbox`
returns (what each one asks of the runtime is in admission.py's docstring). Kept apart so the
inbox module holds only rules; admission.py re-exports every name here."""

from __future__ import annotations

import attrs

from protocol.messages import QuestionGroup, RolloutAnnouncement


@attrs.frozen
class FetchJob:
    round: int
    stage: int
    sender: str
    digest: bytes  # b"": unknown (a DHT sweep job: no announcement was seen)
    group_count: int  # -1: unknown
    dht_only: bool = False


def job_for(announcement: RolloutAnnouncement) -> FetchJob:
    return FetchJob(
        round=announcement.round,
        stage=announcement.stage,
        sender=announcement.peer_id,
        digest=announcement.batch_digest,
        group_count=announcement.group_count,
    )


# ---- decisions --------------------------------------------------------------------------


@attrs.frozen
class Fetch:
    job: FetchJob


class Defer(tuple[float, RolloutAnnouncement]):
    """Sampled out: `(priority, announcement)`, the very entry kept in `RoundInbox.deferred`
    for a top-up when a top-up can reach it (protocol/deferred.py). A tuple, built with
    `tuple.__new__`: one allocation per sampled-out announcement, the entry and the decision
    at once (this runs for most deliveries when `fetch_sample` is set)."""

    __slots__ = ()

    def __new__(cls, priority: float, announcement: RolloutAnnouncement) -> Defer:
        return _new_tuple(cls, (priority, announcement))

    @property
    def priority(self) -> float:
        return self[0]

    @property
    def announcement(self) -> RolloutAnnouncement:
        return self[1]

    @property
    def sender(self) -> str:
        return self[1].peer_id

    def __repr__(self) -> str:
        return f"Defer(sender={self.sender!r}, priority={self.priority!r})"


_new_tuple = tuple.__new__


@attrs.frozen
class Hold:
    round: int
    stage: int = 0


@attrs.frozen
class Reject:
    reason: str
    blame: str | None


@attrs.frozen
class Accept:
    sender: str
    groups: tuple[QuestionGroup, ...]


@attrs.frozen
class NeedInputs:
    """A later-stage batch references batches we do not hold: fetch `jobs` (each from its
    author, else the DHT), hand each to `input_fetched`, then call `fetched` again with
    `inputs_fetched=True`."""

    jobs: tuple[FetchJob, ...]


Decision = Fetch | Defer | Hold | Reject | Accept | NeedInputs | None
