"""Inputs of a later stage (protocol/acr.py): a critique or resolve names the batches it built
on; a verifier that never fetched one gets it (from its author, else the DHT) and admits it
here as an input, then judges the batch that referenced it again (Inbox.fetched)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Protocol

from protocol.decisions import Decision, FetchJob, NeedInputs, Reject
from protocol.errors import ProtocolError
from protocol.messages import RolloutBatch
from protocol.stage_inputs import InputStore
from protocol.verification import Verdict


class Inbox(Protocol):
    """What admitting an input needs of `protocol.admission.Inbox` (declared here, not
    imported: admission imports this module)."""

    counters: Counter[str]
    opener: Any  # protocol.admission.Opener
    rules: Any  # protocol.admission.AdmissionRules
    game: Any  # protocol.game.Game
    store: InputStore

    def reject(self, reason: str, *, blame: str | None) -> Reject: ...


def need_inputs(needed: Iterable[tuple[int, int, str]]) -> NeedInputs:
    """Fetch jobs for referenced batches, by (round, stage, author): no announced digest, no
    announced group count (the reference pins the content; resolving checks it)."""
    return NeedInputs(tuple(FetchJob(r, s, author, b"", -1) for r, s, author in needed))


def admit_input(inbox: Inbox, job: FetchJob, envelope: bytes | None, *, last: bool = False) -> Decision:
    """A batch a later-stage batch references (a `NeedInputs` job) came back: kept in the
    inbox's InputStore once it is the author's, for that round and stage, and verifies; never
    trained on (we did not choose it). Its own missing inputs come back as NeedInputs unless
    `last`. A referenced batch whose own claims do not verify is its author's fault."""
    if envelope is None:
        inbox.counters["input_missing"] += 1
        return None
    digest = inbox.opener.digest(envelope)
    try:
        opened = inbox.opener.open(envelope, max_size=inbox.rules.max_batch_bytes)
    except ProtocolError:
        inbox.counters["input_invalid"] += 1
        return None
    batch = opened.message
    if (
        not isinstance(batch, RolloutBatch)
        or opened.signer != job.sender
        or (batch.swarm_id, batch.round, batch.stage) != (inbox.rules.swarm_id, job.round, job.stage)
    ):
        inbox.counters["input_invalid"] += 1
        return None
    game = inbox.game
    items = game.resolve(batch, inbox.store)
    if isinstance(items, Verdict):
        needed = () if last else game.inputs_needed(batch, inbox.store)
        if needed:
            return need_inputs(needed)
        inbox.counters["input_invalid"] += 1
        return None
    verdict: Verdict = inbox.opener.verdict(
        digest, lambda: game.verify(batch, items) if items else game.verify(batch)
    )
    if not verdict.ok:  # the author signed a batch that does not verify: its fault
        return inbox.reject(verdict.reason or "invalid_batch", blame=job.sender)
    inbox.store.add(digest, batch, items)
    inbox.counters["inputs_fetched"] += 1
    return None
