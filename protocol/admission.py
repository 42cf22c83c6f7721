"""The admission inbox: which peers' batches a peer fetches, accepts, defers or rejects.

Sans-IO: the runtime reports what happened (an announcement was heard, a fetch returned
bytes or nothing, the sweep is due, a round opened) and gets a decision back:

    Fetch(job)             queue this fetch (then call `queued`, or reject "fetch_queue_full")
    Defer(prio, ann)       sampled out: kept for a top-up if a chosen fetch fails (`.sender`,
                           `.priority`)
    Hold(round)            an announcement for the next round, kept until it opens
                           (the swarm has moved on: poll the coordinator now)
    Reject(reason, blame)  counted in `rejections` and the round's record; `blame` gets a
                           strike in `scores` (banned at the threshold, or at once on signed
                           proof of lying when `ban_on_proof`)
    Accept(sender, groups) the batch verified: it joins the round's training pool
    None                   nothing to do (our own publish echoed back)

Keys are free, so senders are told apart by whether they are `established` (a batch of theirs
verified before, or connected to us): unknown keys may take only `unknown_fetch_share` of the
round's fetch budget and park only `max_early_unknown` next-round announcements in all, and
the runtime runs established senders' fetches first (`fetch_lane`). A few hundred throwaway keys
then cannot crowd an honest peer's batch out of a round.

The rules, in the order they are applied, are the methods `heard`, `consider`, `sweep`,
`top_up` and `fetched`. Nothing here does IO or reads a clock: the round's timing comes from
the `RoundMachine` the inbox is given, cryptography and caching from an `Opener` (the
runtime passes its VerifyCache; `PlainOpener` is the uncached reference).

Its state is plain mappings behind small interfaces, so that one process can hold many inboxes
cheaply: the per-sender maps come from `SenderMaps` (dicts by default; the simulator's
numbered lists, protocol/sender_map.py), the connected peers may be a `SharedPeers` view (the
simulator's one set for all), and a multi-stage game's accepted batches go to an `InputStore`.
These rules are written only here: the simulator's fast delivery path
(simulator/fastpath/) decides the common case itself and is held to `heard` and `consider`,
decision by decision, by tests/simulator/test_fastpath_rules.py.
"""

from __future__ import annotations

import hashlib
from abc import abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Protocol

import attrs

from protocol.decisions import (
    Accept,
    Decision,
    Defer,
    Fetch,
    FetchJob,
    Hold,
    NeedInputs,
    Reject,
    _new_tuple,
    job_for,
)
from protocol.deferred import DeferredStore
from protocol.envelope import Opened, open_envelope
from protocol.errors import ProtocolError
from protocol.fetch_draw import FetchDraw, fetch_priority
from protocol.game import Game, mean_reward
from protocol.inputs import admit_input, need_inputs
from protocol.messages import QuestionGroup, RolloutAnnouncement, RolloutBatch
from protocol.rounds import COLLECTING_PHASES, RoundMachine
from protocol.scoring import PeerScores
from protocol.staged import UNBLAMED_INPUT_REASONS
from protocol.verification import Verdict

__all__ = [
    "Accept",
    "AdmissionRules",
    "Decision",
    "Defer",
    "DictMaps",
    "Fetch",
    "FetchJob",
    "Hold",
    "Inbox",
    "InputStore",
    "NeedInputs",
    "OpenedOnce",
    "Opener",
    "PlainOpener",
    "Reject",
    "RoundInbox",
    "SenderMaps",
    "SharedPeers",
    "fetch_priority",
    "job_for",
]

PROOF_OF_LYING = frozenset({"forged_reward", "equivocation"})
"""Rejection reasons backed by the sender's own signature: a batch whose claimed rewards the
deterministic re-scoring contradicts, or two different batches signed for one round."""


MAX_TOP_UPS_PER_ROUND = 64
"""`AdmissionRules.max_top_ups_per_round`'s default: far more failed sampled fetches than a
round with `fetch_sample` in the tens sees while the swarm works."""


class Opener(Protocol):
    """Envelope opening, hashing and verdict memoizing (swarmp2p.peer_cache.VerifyCache)."""

    def open(self, data: bytes, *, max_size: int | None = None) -> Opened: ...

    def digest(self, data: bytes) -> bytes: ...

    def verdict(self, digest: bytes, compute: Callable[[], Any]) -> Any: ...


class OpenedOnce(Protocol):
    """One message opened once for many receivers in one process (the simulator's SharedOpen):
    what `opener.open(data, max_size=max_size)` returns or raises for the message's data."""

    def open(self, opener: Opener, max_size: int) -> Opened: ...


class InputStore(Protocol):
    """What the inbox does with a multi-stage game's store of accepted batches (the batches
    later stages build on); the game reads it in `resolve` and `inputs_needed`."""

    def add(self, digest: bytes, batch: RolloutBatch, items: Sequence[Any] = ()) -> None: ...

    def forget_before(self, round_number: int) -> None: ...


class SenderMaps(Protocol):
    """Where an inbox keeps its per-sender maps: `Inbox.known` (sender -> last round heard of)
    and each round's `RoundInbox.announced` (sender -> announced digest). A node's are dicts
    (`DictMaps`); the simulator's many inboxes share a numbering of peers and keep lists by
    number (protocol/sender_map.py `PeerNumbers`), N x N entries at N peers."""

    def rounds(self) -> MutableMapping[str, int]: ...

    def digests(self) -> MutableMapping[str, bytes]: ...

    def drop_below(self, rounds: MutableMapping[str, int], floor: int) -> None:
        """Remove every entry of `rounds` (made by `rounds()`) whose round is below `floor`."""
        ...


class DictMaps:
    """SenderMaps as plain dicts (a node's)."""

    def rounds(self) -> MutableMapping[str, int]:
        return {}

    def digests(self) -> MutableMapping[str, bytes]:
        return {}

    def drop_below(self, rounds: MutableMapping[str, int], floor: int) -> None:
        for peer in [p for p, last in rounds.items() if last < floor]:
            del rounds[peer]


class SharedPeers(AbstractSet[str]):
    """A set of connected peers that many inboxes share (the simulator's PeersExcept): kept as
    it is, not copied into a frozenset each (O(peers) per peer), and merged into a set by
    itself (`union_into`: set operations in C, where iterating it would be a Python loop).
    A base class, not a Protocol: `peers_connected` tells it apart on every call, and an ABC's
    isinstance is cached where a runtime Protocol's walks the members each time."""

    @abstractmethod
    def union_into(self, target: set[str]) -> None: ...


class PlainOpener:
    """The uncached Opener: every call does the work."""

    def open(self, data: bytes, *, max_size: int | None = None) -> Opened:
        return open_envelope(data, max_size=max_size)

    def digest(self, data: bytes) -> bytes:
        return hashlib.sha256(data).digest()

    def verdict(self, digest: bytes, compute: Callable[[], Any]) -> Any:
        return compute()


@attrs.frozen
class AdmissionRules:
    swarm_id: str
    me: str
    seed: int
    max_announce_bytes: int = 1024 + 256
    max_batch_bytes: int = 4 * 1024 * 1024 + 256
    max_duplicates_per_round: int = 4
    max_fetch_per_round: int = 256
    fetch_sample: int = 0
    """0: fetch every announced batch; N: about N per round (see `fetch_probability`)."""
    ban_on_proof: bool = True
    known_peer_rounds: int = 10
    unknown_fetch_share: float = 0.25
    """The share of `max_fetch_per_round` that senders we have no reason to trust may take (see
    `Inbox.established`): keys are free, so without it a few hundred throwaway keys announcing
    first fill the budget and the honest peers' batches go unfetched."""
    max_early_unknown: int = 16
    """How many announcements for the NEXT round (held until it opens) unknown senders may park,
    in all; each sender parks at most one. Established senders are held to the fetch budget."""
    max_top_ups_per_round: int = attrs.field(default=MAX_TOP_UPS_PER_ROUND, validator=attrs.validators.ge(0))
    """How many sampled-out announcements a round may take to replace failed fetches (`top_up`);
    only that many are kept (`protocol.deferred`). Not `max_fetch_per_round`: the simulator sets
    that to twice the peers, and the deferred entries would stay O(peers) per peer."""


@attrs.define
class RoundInbox:
    """What one round collected: announcements, fetches, accepted batches, rejections."""

    round: int
    stage: int
    fetch_probability: float = 1.0
    announced: MutableMapping[str, bytes] = attrs.Factory(dict)  # sender -> digest (SenderMaps)
    duplicates: Counter[str] = attrs.Factory(Counter)
    fetches: int = 0
    unknown_fetches: int = 0  # of `fetches`, those for senders not `established`
    fetch_draw: FetchDraw | None = None  # this round's draw, made at its first use
    # sampled out, the lowest kept for top-ups: sender -> (priority, announcement) (a `Defer`)
    deferred: DeferredStore = attrs.Factory(lambda: DeferredStore(MAX_TOP_UPS_PER_ROUND))
    rejected: Counter[str] = attrs.Factory(Counter)
    external: dict[str, tuple[QuestionGroup, ...]] = attrs.Factory(dict)
    external_reward: dict[str, float] = attrs.Factory(dict)


def fetch_probability(fetch_sample: int, connected: int) -> float:
    """The share of announced batches to fetch so that about `fetch_sample` are fetched."""
    if not fetch_sample:
        return 1.0
    return min(1.0, fetch_sample / max(1, connected))


class Inbox:
    """One peer's admission state across rounds. `scores`, `rejections` and `counters` are
    read by the runtime for its status and records."""

    def __init__(
        self,
        rules: AdmissionRules,
        machine: RoundMachine,
        game: Game,
        *,
        opener: Opener | None = None,
        scores: PeerScores | None = None,
        counters: Counter[str] | None = None,
        peer_numbers: SenderMaps | None = None,
        store: InputStore | None = None,
    ) -> None:
        self.rules = rules
        self.machine = machine
        self.game = game
        self.opener: Opener = opener if opener is not None else PlainOpener()
        self.scores = scores if scores is not None else PeerScores()
        self.counters: Counter[str] = counters if counters is not None else Counter()
        self.rejections: Counter[str] = Counter()
        self.current: RoundInbox | None = None
        # The simulator's many inboxes share one numbering of peers and keep their per-sender
        # maps (`known`, each round's `announced`) as lists by number; a node keeps dicts.
        self.sender_maps: SenderMaps = peer_numbers if peer_numbers is not None else DictMaps()
        # Peers heard from (announced or served a verified batch) -> last round: swept for in
        # the DHT when a round brings no announcement from them.
        self.known: MutableMapping[str, int] = self.sender_maps.rounds()
        # Announcements for the NEXT position (round, or stage of a multi-stage game) that
        # arrived before our own poll saw it open, by round (one position per round is ever next).
        self.early: dict[int, dict[str, tuple[RolloutAnnouncement, bytes]]] = {}
        self.early_unknown: Counter[int] = Counter()  # how many of `early[round]` are not established
        # Peers the runtime reports connected (at round open): established before any batch of
        # theirs verified, so a fresh swarm's first round is not left to the unknown share.
        self.connected: AbstractSet[str] = frozenset()
        # A multi-stage game's inputs: this round's accepted batches (and our own), by stage.
        self.store: InputStore = store if store is not None else _staged_inputs()

    # ---- bookkeeping --------------------------------------------------------------------

    def reject(self, reason: str, *, blame: str | None) -> Reject:
        self.rejections[reason] += 1
        if self.current is not None:
            self.current.rejected[reason] += 1
        if blame is not None and blame != self.rules.me:
            self.scores.record_invalid(blame, reason)
            if self.rules.ban_on_proof and reason in PROOF_OF_LYING:
                self.scores.ban(blame, reason)
        return Reject(reason, blame)

    def open_round(self, round_number: int, stage: int, connected: int) -> RoundInbox:
        """A new round opened: a fresh inbox for it (the old one stays with its record)."""
        self.scores.new_round(round_number)  # forgets long-silent peers: the table stays bounded
        if self.game.stage_count > 1:
            self.store.forget_before(round_number)  # later stages build on this round's only
        self.current = RoundInbox(
            round=round_number,
            stage=stage,
            fetch_probability=fetch_probability(self.rules.fetch_sample, connected),
            announced=self.sender_maps.digests(),
            deferred=DeferredStore(self.rules.max_top_ups_per_round),
        )
        return self.current

    @property
    def unknown_fetch_limit(self) -> int:
        """How many fetches a round gives senders that are not `established` (the runtime may
        replace `rules` once it learns the swarm's, so this is derived, never cached)."""
        rules = self.rules
        return max(1, int(rules.max_fetch_per_round * rules.unknown_fetch_share))

    def peers_connected(self, peers: Iterable[str]) -> None:
        """The runtime's connected peers, now (reported when a round opens)."""
        if type(peers) is frozenset or isinstance(peers, SharedPeers):
            self.connected = peers  # immutable: kept as it is, not copied
        else:
            self.connected = frozenset(peers)

    def established(self, sender: str) -> bool:
        """A sender with a reason to trust it: a batch of its verified before, or connected to us.
        A throwaway key has neither; an announcement alone does not make a sender established."""
        return sender in self.connected or self.scores.valid.get(sender, 0) > 0

    def unknown_budget_full(self) -> bool:
        """Would an unknown sender's announcement be refused now, for this round or the next?"""
        # This runs for every delivery (Fetcher.on_announcement), so the common answers come
        # first and without a generator: no unknown fetch yet (the limit is at least 1), and no
        # early announcement parked.
        state = self.current
        if state is not None and state.unknown_fetches and state.unknown_fetches >= self.unknown_fetch_limit:
            return True
        early_unknown = self.early_unknown
        if early_unknown:
            limit = self.rules.max_early_unknown
            for count in early_unknown.values():
                if count >= limit:
                    return True
        return False

    def fetch_lane(self, sender: str) -> int:
        """The runtime's fetch queue runs lane 0 before lane 1: established senders first, so
        fetches of unknown keys (which may time out) never delay theirs."""
        return 0 if self.established(sender) else 1

    def queued(self, job: FetchJob) -> None:
        """The runtime queued the fetch of a `Fetch` decision."""
        current = self.current
        if current is not None and current.round == job.round:
            current.fetches += 1

    def training_pool(self, inbox: RoundInbox) -> dict[str, tuple[QuestionGroup, ...]]:
        """The round's accepted batches minus those of peers banned since they were accepted."""
        return {peer: groups for peer, groups in inbox.external.items() if not self.scores.is_banned(peer)}

    # ---- announcements ------------------------------------------------------------------

    def heard(self, sender: str, data: bytes, shared: OpenedOnce | None = None) -> Decision:
        """An announcement arrived on the topic; `sender` is who the transport says sent it.
        `shared`: the same message is being handed to many receivers in this process, and its
        envelope is opened once for all of them (the outcome is the same: see
        simulator/fastpath/shared_open.py)."""
        rules = self.rules
        if sender == rules.me:
            return None  # our own publish echoed back
        if sender in self.scores.banned:  # scores.is_banned, inlined: this runs per delivery
            return self.reject("banned", blame=None)
        max_bytes = rules.max_announce_bytes
        if len(data) > max_bytes:
            return self.reject("oversized", blame=sender)
        try:
            if shared is None:
                opened = self.opener.open(data, max_size=max_bytes)
            else:
                opened = shared.open(self.opener, max_bytes)
        except ProtocolError as error:
            return self.reject(error.reason, blame=sender)
        announcement = opened.message
        if not isinstance(announcement, RolloutAnnouncement):
            return self.reject("wrong_kind", blame=sender)
        if opened.signer != sender:
            # Someone relays (or replays) a message signed by another peer as its own.
            return self.reject("sender_mismatch", blame=sender)
        if announcement.swarm_id != rules.swarm_id:
            return self.reject("wrong_swarm", blame=sender)
        current, stage = self.machine.current_position()
        if announcement.round < current:
            return self.reject("stale_round", blame=None)  # a replay, or a lagging peer: not blamed
        if announcement.round == current and not (
            announcement.stage == stage + 1 < self.game.stage_count  # the next stage: held
        ):
            return self.consider(announcement, opened.digest)
        if announcement.round <= current + 1:
            early = self.early.setdefault(announcement.round, {})
            if len(early) < rules.max_fetch_per_round and announcement.peer_id not in early:
                if not self.established(sender):
                    if self.early_unknown[announcement.round] >= rules.max_early_unknown:
                        return self.reject("future_round_limit", blame=None)
                    self.early_unknown[announcement.round] += 1
                early[announcement.peer_id] = (announcement, opened.digest)
                return Hold(announcement.round, announcement.stage)
        return self.reject("future_round", blame=None)

    def release_early(self, round_number: int) -> list[Decision]:
        """The round (or stage) opened and its questions are known: consider the announcements
        that came before it did (in sender order), and forget older ones."""
        for stale in [r for r in self.early if r < round_number]:
            del self.early[stale]
        for stale in [r for r in self.early_unknown if r <= round_number]:
            del self.early_unknown[stale]
        early = self.early.pop(round_number, {})
        return [self.consider(*early[sender]) for sender in sorted(early)]

    def consider(self, announcement: RolloutAnnouncement, digest: bytes) -> Decision:
        """An announcement for the current round: fetch unless it is a repeat or too late."""
        state = self.current
        sender = announcement.peer_id
        if state is None or state.round != announcement.round:
            return self.reject("stale_round", blame=None)
        if self.machine.phase not in COLLECTING_PHASES:
            return self.reject("late", blame=None)
        if announcement.stage != state.stage:
            return self.reject("wrong_stage", blame=None)
        previous = state.announced.get(sender)
        if previous is not None:
            if previous != announcement.batch_digest:
                return self.reject("equivocation", blame=sender)  # two different batches, one round
            state.duplicates[sender] += 1
            over = state.duplicates[sender] == self.rules.max_duplicates_per_round + 1
            return self.reject("flood" if over else "duplicate", blame=sender if over else None)
        if announcement.size_bytes > self.rules.max_batch_bytes:
            return self.reject("oversized", blame=sender)
        if state.fetches >= self.rules.max_fetch_per_round:
            return self.reject("fetch_limit", blame=None)
        unknown = not self.established(sender)
        if unknown and state.unknown_fetches >= self.unknown_fetch_limit:
            return self.reject("fetch_unknown_limit", blame=None)
        state.announced[sender] = announcement.batch_digest
        self.known[sender] = state.round
        if state.fetch_probability < 1.0:
            priority = self.fetch_draw(state)(sender)
            if priority >= state.fetch_probability:
                deferred = _new_tuple(Defer, (priority, announcement))
                if priority <= state.deferred.cutoff:  # else never taken: spare the call
                    state.deferred.offer(deferred)  # kept if a top-up could still reach it
                self.counters["fetch_deferred"] += 1
                return deferred
        if unknown:
            state.unknown_fetches += 1
        return Fetch(job_for(announcement))

    def fetch_draw(self, state: RoundInbox) -> FetchDraw:
        """The round's fetch draw (protocol/fetch_draw.py), made once per round: it runs for every
        announcement of every round, and hashing the shared prefix once halves its cost."""
        draw = state.fetch_draw
        if draw is None:
            draw = state.fetch_draw = FetchDraw(self.rules.seed, state.round, self.rules.me)
        return draw

    # ---- the DHT sweep and top-ups ------------------------------------------------------

    def sweep(self, connected: Iterable[str]) -> Iterator[FetchJob]:
        """The sweep is due (the machine said SweepDht): DHT lookups for known or connected
        peers that announced nothing this round. Lazy: the runtime queues each job (and calls
        `queued`) before the next one is decided, so the per-round fetch limit holds."""
        state = self.current
        if state is None:
            return
        oldest = state.round - self.rules.known_peer_rounds
        self.sender_maps.drop_below(self.known, oldest)
        candidates = set(self.known)
        if isinstance(connected, SharedPeers):
            connected.union_into(candidates)  # the simulator's shared set, without a walk in Python
        else:
            candidates.update(connected)  # now, not at round open: peers join
        # Those that announced are skipped below: left out before sorting (set operations in C),
        # since nearly every peer announces and the sweep runs for every peer every round.
        candidates.difference_update(state.announced)
        for peer in sorted(candidates):
            if peer == self.rules.me or peer in state.announced or self.scores.is_banned(peer):
                continue
            if state.fetch_probability < 1.0 and self.fetch_draw(state)(peer) >= state.fetch_probability:
                continue  # sampled out: we would not have fetched its batch had we heard of it
            if state.fetches >= self.rules.max_fetch_per_round:
                break
            self.counters["sweep_lookups"] += 1
            yield FetchJob(state.round, state.stage, peer, b"", -1, dht_only=True)

    def top_up(self, round_number: int) -> Fetch | None:
        """A sampled fetch failed: fetch the next deferred batch instead (lowest priority first).
        A round takes at most `max_top_ups_per_round` deferred entries (a banned sender's one
        counts too): a wave of failures does not turn a sampled round into fetching everyone."""
        state = self.current
        while (
            state is not None
            and state.round == round_number
            and state.deferred
            and self.machine.collecting(round_number, state.stage)
        ):
            entry = state.deferred.take()
            if entry is None:
                return None  # the round's top-ups are used up
            _, announcement = entry
            if not self.scores.is_banned(announcement.peer_id):
                return Fetch(job_for(announcement))
        return None

    # ---- fetched batches ----------------------------------------------------------------

    def may_fetch(self, job: FetchJob) -> bool:
        """Before the fetch: still worth doing (the round still collects)?"""
        if not self.machine.collecting(job.round, job.stage):
            self.reject("late", blame=None)
            return False
        return True

    def fetched(
        self, job: FetchJob, envelope: bytes | None, direct: bool, *, inputs_fetched: bool = False
    ) -> Decision:
        """The fetch of `job` returned `envelope` (None: nothing, from anywhere), `direct`ly from
        the announcer or from the DHT. Accept only a batch signed by the sender, for the round,
        stage and size announced, that the game verifies, while the round still collects."""
        rules = self.rules
        if envelope is None:
            if job.dht_only:
                self.counters["sweep_missing"] += 1  # nothing published, or not reachable: no fault
                return None
            return self.reject("fetch_failed", blame=None)
        opener = self.opener
        digest = opener.digest(envelope)
        if job.digest and digest != job.digest:
            # From the announcer itself this is a lie; from the DHT it may be someone else's record.
            return self.reject("digest_mismatch", blame=job.sender if direct else None)
        try:
            opened = opener.open(envelope, max_size=rules.max_batch_bytes)
        except ProtocolError as error:
            return self.reject(error.reason, blame=job.sender)
        batch = opened.message
        if not isinstance(batch, RolloutBatch):
            return self.reject("wrong_kind", blame=job.sender)
        if opened.signer != job.sender:
            return self.reject("sender_mismatch", blame=job.sender)
        if (
            batch.swarm_id != rules.swarm_id
            or batch.round != job.round
            or batch.stage != job.stage
            or (job.group_count >= 0 and len(batch.groups) != job.group_count)
        ):
            return self.reject("batch_mismatch", blame=job.sender)
        game = self.game
        items = game.resolve(batch, self.store) if game.stage_count > 1 else ()
        if isinstance(items, Verdict):  # what we hold decides: never cached
            reason = items.reason or "bad_input"
            needed = game.inputs_needed(batch, self.store) if not inputs_fetched else ()
            if reason in UNBLAMED_INPUT_REASONS and needed:
                return need_inputs(needed)
            return self.reject(reason, blame=None if reason in UNBLAMED_INPUT_REASONS else job.sender)
        verdict: Verdict = opener.verdict(
            digest, lambda: game.verify(batch, items) if items else game.verify(batch)
        )
        if not verdict.ok:
            return self.reject(verdict.reason or "invalid_batch", blame=job.sender)
        if not self.machine.collecting(job.round, job.stage):
            return self.reject("late", blame=None)
        state = self.current
        assert state is not None
        if self.scores.is_banned(job.sender):
            return self.reject("banned", blame=None)
        if job.dht_only:
            announced = state.announced.setdefault(job.sender, digest)
            if announced != digest:
                # Meanwhile the sender announced a different batch for this round. Not blamed
                # here: the DHT record may predate a restart of the sender within the round.
                return self.reject("sweep_conflict", blame=None)
            self.counters["sweep_recovered"] += 1
        self.scores.record_valid(job.sender)
        self.known[job.sender] = job.round
        state.external[job.sender] = batch.groups
        if game.stage_count > 1:
            self.store.add(digest, batch, items)
            state.external[job.sender] = game.training_groups(batch.stage, items, batch.groups)
        reward = mean_reward(batch.groups)
        if reward is not None:
            state.external_reward[job.sender] = reward
        self.counters["accepted_batches"] += 1
        return Accept(job.sender, batch.groups)

    def input_fetched(self, job: FetchJob, envelope: bytes | None, *, last: bool = False) -> Decision:
        """A batch a later-stage batch references (a `NeedInputs` job) came back: see
        `protocol.inputs.admit_input`."""
        return admit_input(self, job, envelope, last=last)


def _staged_inputs() -> InputStore:
    """The games' one store class, for a caller that passes none (a test's inbox); the driver
    passes its game's (`GameSpec.store`)."""
    from protocol.stage_inputs import InputStore as StagedInputStore

    return StagedInputStore()
