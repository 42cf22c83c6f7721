"""Admission rules (protocol/admission.py) that a plausible slip would bend without any other
test noticing: the size cap on what a fetch returns, the unknown-key budget as the fetcher asks
about it, next-round announcements released when their round opens, the DHT sweep under fetch
sampling and the fetch limit, a later stage's top-ups, what an accepted batch leaves behind
(reward, groups, stored inputs, counters), verdicts memoized per batch, and the inputs of inputs.
Each test fails on a mutant scripts/mutation.sh made of the rule it names.
"""

from __future__ import annotations

import copy
import hashlib
from collections import Counter
from collections.abc import MutableMapping

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.acr import CRITIQUE, RESOLVE
from protocol.admission import (
    Accept,
    AdmissionRules,
    Defer,
    DictMaps,
    Fetch,
    FetchJob,
    Hold,
    Inbox,
    NeedInputs,
    Reject,
    job_for,
)
from protocol.answer_verify import VERIFY, AnswerVerifyGame, format_verdicts
from protocol.envelope import seal
from protocol.fetch_draw import fetch_priority
from protocol.game import Game, SingleStageGame
from protocol.games import REGISTRY
from protocol.messages import Completion, QuestionGroup, RolloutAnnouncement, RolloutBatch
from protocol.rounds import RoundMachine, RoundOpened
from protocol.scoring import PeerScores
from protocol.staged import InputStore
from protocol.verification import Verdict
from simulator.fastpath.shared_open import SharedOpen
from swarmp2p.peer_cache import VerifyCache
from tests.helpers.inbox import (
    ALICE,
    BOB,
    GAME,
    ME,
    ROUND,
    SEED,
    SWARM,
    EchoRegistry,
    announce,
    batch_envelope,
    fetch_announced,
    groups_for,
    key,
    make_inbox,
    pid,
)
from tests.protocol.test_protocol_acr import GAME as ACR
from tests.protocol.test_protocol_acr import ROUND as ACR_ROUND
from tests.protocol.test_protocol_acr import RULES, answers, honest_batch, sealed, store_with_answers
from tests.protocol.test_protocol_acr import SEED as ACR_SEED
from tests.protocol.test_protocol_acr import SWARM as ACR_SWARM

CAROL = key("carol")


def signer(i: int) -> bytes:
    return hashlib.sha256(b"pinned-admission-%d" % i).digest()


def staged_inbox(game: Game, store: InputStore, stage: int, **rules: object) -> Inbox:
    """An inbox of a multi-stage `game` whose round ACR_ROUND is collecting `stage`."""
    machine = RoundMachine(plan=REGISTRY[game.name].plan)
    machine.handle(0, RoundOpened(ACR_ROUND, collect_until_ms=1000, round_ends_ms=2000, stage=stage))
    inbox = Inbox(
        AdmissionRules(swarm_id=ACR_SWARM, me=pid(ME), seed=ACR_SEED, **rules),  # type: ignore[arg-type]
        machine,
        game,
        scores=PeerScores(),
        store=store,
    )
    inbox.open_round(ACR_ROUND, stage, connected=0)
    return inbox


def fetch_batch(inbox: Inbox, author: bytes, batch: RolloutBatch) -> object:
    """`author` announces `batch` and the fetch returns it: the inbox's decision."""
    envelope, digest = sealed(batch, author)
    announcement = RolloutAnnouncement(
        ACR_SWARM, batch.round, batch.stage, pid(author), digest, len(batch.groups), len(envelope)
    )
    decision = inbox.heard(pid(author), seal(announcement, author))
    assert isinstance(decision, Fetch), decision
    inbox.queued(decision.job)
    return inbox.fetched(decision.job, envelope, direct=True)


# ---- what a fetch returns ----------------------------------------------------------------------


def test_a_fetched_batch_over_the_size_cap_is_refused_and_blamed_whatever_its_announcement_said() -> None:
    """The announced `size_bytes` is the sender's claim: the bytes that come back are held to
    `max_batch_bytes` themselves, and a batch over it is the sender's fault."""
    envelope = batch_envelope(ALICE)
    inbox = make_inbox(max_batch_bytes=len(envelope) - 1)
    claim = RolloutAnnouncement(SWARM, ROUND, 0, pid(ALICE), hashlib.sha256(envelope).digest(), 2, 100)
    decision = inbox.heard(pid(ALICE), seal(claim, ALICE))
    assert isinstance(decision, Fetch)
    assert inbox.fetched(decision.job, envelope, direct=True) == Reject("oversized", pid(ALICE))
    sweep = FetchJob(ROUND, 0, pid(BOB), b"", -1, dht_only=True)  # no claim at all
    assert inbox.fetched(sweep, batch_envelope(BOB), direct=False) == Reject("oversized", pid(BOB))
    assert inbox.rejections["oversized"] == 2
    assert inbox.scores.invalid[pid(ALICE)] == 1 and inbox.scores.invalid[pid(BOB)] == 1
    assert inbox.current is not None and inbox.current.external == {}


def test_a_batch_of_exactly_the_size_cap_is_fetched_and_accepted() -> None:
    envelope = batch_envelope(ALICE)
    inbox = make_inbox(max_batch_bytes=len(envelope))
    assert isinstance(fetch_announced(inbox, ALICE, envelope), Accept)


def test_a_batch_announced_with_no_groups_must_have_none() -> None:
    """A group count of 0 is a claim like any other (only -1, a sweep's, means unknown)."""
    inbox = make_inbox()
    assert fetch_announced(inbox, ALICE, batch_envelope(ALICE), group_count=0) == Reject(
        "batch_mismatch", pid(ALICE)
    )


def test_an_accepted_batch_is_handed_over_with_its_groups_and_mean_reward() -> None:
    """The runtime trains on `Accept.groups`, and ranks the round's winners by each sender's
    mean claimed reward (`external_reward`)."""
    inbox = make_inbox()
    groups = groups_for(pid(ALICE))  # rewards 1.0 and 0.0 per group
    assert fetch_announced(inbox, ALICE, batch_envelope(ALICE)) == Accept(pid(ALICE), groups)
    assert inbox.current is not None and inbox.current.external_reward == {pid(ALICE): 0.5}
    assert inbox.current.external == {pid(ALICE): groups}


def test_accepted_batches_recovered_sweeps_and_missing_records_are_each_counted() -> None:
    """The node's status and records read these counters: each event counts once."""
    inbox = make_inbox()
    for k in (ALICE, BOB):
        assert isinstance(fetch_announced(inbox, k, batch_envelope(k)), Accept)
    carol, dave = key("carol"), key("dave")
    for k in (carol, dave):
        job = FetchJob(ROUND, 0, pid(k), b"", -1, dht_only=True)
        assert isinstance(inbox.fetched(job, batch_envelope(k), direct=False), Accept)
    for name in ("erin", "frank", "grace"):
        assert (
            inbox.fetched(FetchJob(ROUND, 0, pid(key(name)), b"", -1, dht_only=True), None, direct=False)
            is None
        )
    assert inbox.counters["accepted_batches"] == 4
    assert inbox.counters["sweep_recovered"] == 2
    assert inbox.counters["sweep_missing"] == 3


def test_a_memoized_verdict_belongs_to_its_own_batch() -> None:
    """With the runtime's VerifyCache, a verdict is remembered by the batch's digest: a forged
    batch after an honest one gets its own verdict, not the honest one's."""
    inbox = make_inbox()
    inbox.opener = VerifyCache()
    assert isinstance(fetch_announced(inbox, ALICE, batch_envelope(ALICE)), Accept)
    forged = batch_envelope(BOB, groups=groups_for(pid(BOB), forge=True))
    assert fetch_announced(inbox, BOB, forged) == Reject("forged_reward", pid(BOB))


class _Reasonless(SingleStageGame):
    """A game that refuses every batch without saying why."""

    def verify(self, batch: RolloutBatch, items: object = ()) -> Verdict:  # type: ignore[override]
        return Verdict(ok=False, reason=None, groups_checked=0)


class _UnresolvableInputs(AnswerVerifyGame):
    """A staged game whose later-stage references never resolve, without a reason."""

    def resolve(self, batch: RolloutBatch, store: object) -> Verdict:  # type: ignore[override]
        return Verdict(ok=False, reason=None, groups_checked=0)


def test_a_refusal_without_a_reason_is_counted_and_blamed_under_a_default_one() -> None:
    """Rejections are counted by reason (status, round records): a game that gives none still
    lands under a named one, `invalid_batch` for a batch, `bad_input` for its references."""
    inbox = make_inbox()
    inbox.game = _Reasonless(seed=SEED, tasks=("echo",), questions_per_round=2, registry=EchoRegistry())
    assert fetch_announced(inbox, ALICE, batch_envelope(ALICE)) == Reject("invalid_batch", pid(ALICE))
    game = _UnresolvableInputs(answer=RULES)
    staged = staged_inbox(game, InputStore(), VERIFY)
    batch = RolloutBatch(ACR_SWARM, ACR_ROUND, VERIFY, pid(ALICE), answers(ALICE).groups)
    assert fetch_batch(staged, ALICE, batch) == Reject("bad_input", pid(ALICE))
    assert inbox.rejections == {"invalid_batch": 1} and staged.rejections == {"bad_input": 1}


# ---- multi-stage games -------------------------------------------------------------------------


def test_a_two_stage_games_answers_are_kept_as_inputs_and_its_verdicts_checked_against_them() -> None:
    """answer -> verify: an accepted answer batch is stored for the verify stage to build on, and
    an honest verify batch is resolved against the answers held, then accepted."""
    game = AnswerVerifyGame(answer=RULES)
    store = InputStore()
    answering = staged_inbox(game, store, 0)
    for author in (ALICE, BOB):
        assert isinstance(fetch_batch(answering, author, answers(author)), Accept)
    assert store.get(ACR_ROUND, 0, pid(ALICE)) is not None and store.get(ACR_ROUND, 0, pid(BOB)) is not None
    verifying = staged_inbox(game, store, VERIFY)
    items = game.items(ACR_ROUND, VERIFY, pid(CAROL), store)
    assert items
    groups = []
    for subject in items:
        texts = (
            format_verdicts(subject.truth(RULES.registry)),
            format_verdicts((True,) * len(subject.candidates)),
        )
        groups.append(
            QuestionGroup(subject.ref, tuple(Completion(t, subject.score(t, RULES.registry)) for t in texts))
        )
    verdicts = RolloutBatch(ACR_SWARM, ACR_ROUND, VERIFY, pid(CAROL), tuple(groups))
    assert isinstance(fetch_batch(verifying, CAROL, verdicts), Accept)


def test_a_one_stage_inbox_keeps_no_accepted_batch_as_an_input() -> None:
    """A one-stage game builds on nothing, and its store is never trimmed (`forget_before` runs
    for staged games only): accepted batches must not pile up in it round after round."""
    inbox = make_inbox()
    assert isinstance(fetch_announced(inbox, ALICE, batch_envelope(ALICE)), Accept)
    assert inbox.store.get(ROUND, 0, pid(ALICE)) is None  # type: ignore[attr-defined]
    assert not inbox.store.entries  # type: ignore[attr-defined]


def _store_through_critiques(*critics: bytes) -> InputStore:
    store = store_with_answers(ALICE, BOB, CAROL)
    for critic in critics:
        items = ACR.items(ACR_ROUND, CRITIQUE, pid(critic), store)
        critique = honest_batch(critic, CRITIQUE, items)
        store.add(sealed(critique, critic)[1], critique, items)
    return store


def test_an_accepted_resolve_is_trained_on_as_answers_to_the_original_questions() -> None:
    """The trainer rebuilds prompts from a group's question: a resolve group enters the round's
    pool under the original question it answers, not its wire reference to a critique."""
    store = _store_through_critiques(BOB, CAROL)
    inbox = staged_inbox(ACR, store, RESOLVE)
    items = ACR.items(ACR_ROUND, RESOLVE, pid(ALICE), store)
    resolve = honest_batch(ALICE, RESOLVE, items)
    assert isinstance(fetch_batch(inbox, ALICE, resolve), Accept)
    expected = tuple(
        QuestionGroup(item.question, g.completions) for item, g in zip(items, resolve.groups, strict=True)
    )
    assert inbox.training_pool(inbox.current) == {pid(ALICE): expected}  # type: ignore[arg-type]
    assert all(g.question != e.question for g, e in zip(resolve.groups, expected, strict=True))


def test_an_inputs_own_missing_inputs_are_asked_for_unless_it_is_the_last_try() -> None:
    """A resolve built on critiques we never saw: each critique, once fetched, asks for the
    answers it built on (by default), and on the last try is dropped as an invalid input."""
    theirs = _store_through_critiques(BOB, CAROL)
    inbox = staged_inbox(ACR, InputStore(), RESOLVE)
    resolve = honest_batch(ALICE, RESOLVE, ACR.items(ACR_ROUND, RESOLVE, pid(ALICE), theirs))
    need = fetch_batch(inbox, ALICE, resolve)
    assert isinstance(need, NeedInputs) and need.jobs
    critics = {pid(BOB): BOB, pid(CAROL): CAROL}
    job = need.jobs[0]
    assert (job.round, job.stage) == (ACR_ROUND, CRITIQUE)
    stored = theirs.get(ACR_ROUND, CRITIQUE, job.sender)
    assert stored is not None
    envelope = sealed(stored.batch, critics[job.sender])[0]
    deeper = inbox.input_fetched(job, envelope)
    assert isinstance(deeper, NeedInputs)
    assert {(j.round, j.stage) for j in deeper.jobs} == {(ACR_ROUND, 0)}
    assert inbox.input_fetched(job, envelope, last=True) is None
    assert inbox.counters["input_invalid"] == 1 and inbox.store.get(ACR_ROUND, CRITIQUE, job.sender) is None


def test_a_later_stages_deferred_fetch_is_topped_up_while_that_stage_collects() -> None:
    """At stage 1 of a staged round, a sampled-out announcement replaces a failed fetch, and a
    fetch for stage 1 is still worth starting: collecting is judged for the job's stage."""
    inbox = staged_inbox(ACR, InputStore(), CRITIQUE, fetch_sample=1)
    inbox.open_round(ACR_ROUND, CRITIQUE, connected=400)  # about 1 in 400 fetched: the rest deferred
    deferred = []
    for i in range(6):
        k = signer(i)
        claim = RolloutAnnouncement(ACR_SWARM, ACR_ROUND, CRITIQUE, pid(k), bytes([i]) * 32, 2, 500)
        decision = inbox.heard(pid(k), seal(claim, k))
        if isinstance(decision, Defer):
            deferred.append(decision)
    assert deferred
    top_up = inbox.top_up(ACR_ROUND)
    assert isinstance(top_up, Fetch) and top_up.job.stage == CRITIQUE
    assert top_up.job.sender == min(deferred, key=lambda d: (d.priority, d.sender)).sender
    assert inbox.may_fetch(top_up.job) and not inbox.rejections


# ---- unknown keys and next-round announcements -------------------------------------------------


def test_an_inbox_built_with_defaults_only_answers_before_its_first_round_and_plays_a_staged_one() -> None:
    """A node's inbox exists before its first round opens (the fetcher asks it about every
    delivery from then on); built with no scores, counters or store of the runtime's, it keeps
    its own, and a staged game's inputs of older rounds are dropped as each round opens."""
    game = AnswerVerifyGame(answer=RULES)
    machine = RoundMachine(plan=REGISTRY[game.name].plan)
    machine.handle(0, RoundOpened(ACR_ROUND, collect_until_ms=1000, round_ends_ms=2000))
    inbox = Inbox(AdmissionRules(swarm_id=ACR_SWARM, me=pid(ME), seed=ACR_SEED), machine, game)
    assert inbox.unknown_budget_full() is False
    batch = answers(ALICE)
    envelope, digest = sealed(batch, ALICE)
    claim = RolloutAnnouncement(ACR_SWARM, ACR_ROUND, 0, pid(ALICE), digest, len(batch.groups), len(envelope))
    assert inbox.heard(pid(ALICE), seal(claim, ALICE)) == Reject("stale_round", None)  # no round open yet
    inbox.open_round(ACR_ROUND, 0, connected=0)
    assert isinstance(fetch_batch(inbox, ALICE, batch), Accept)
    assert inbox.scores.valid[pid(ALICE)] == 1 and inbox.counters["accepted_batches"] == 1
    assert inbox.store.get(ACR_ROUND, 0, pid(ALICE)) is not None  # type: ignore[attr-defined]
    inbox.open_round(ACR_ROUND + 1, 0, connected=0)
    assert inbox.store.get(ACR_ROUND, 0, pid(ALICE)) is None  # type: ignore[attr-defined]


class _HeldMaps(DictMaps):
    """SenderMaps whose maps the test can read (as the simulator's numbered ones are its own)."""

    def __init__(self) -> None:
        self.made_rounds: list[MutableMapping[str, int]] = []
        self.made_digests: list[MutableMapping[str, bytes]] = []

    def rounds(self) -> MutableMapping[str, int]:
        self.made_rounds.append({})
        return self.made_rounds[-1]

    def digests(self) -> MutableMapping[str, bytes]:
        self.made_digests.append({})
        return self.made_digests[-1]


def test_the_inbox_keeps_its_state_where_the_runtime_hands_it() -> None:
    """The runtime reads the scores (bans), counters (status) and verify cache it passes in, and
    the simulator's inboxes keep their per-sender maps in the simulator's numbered ones."""
    machine = RoundMachine()
    machine.handle(0, RoundOpened(ROUND, collect_until_ms=1000, round_ends_ms=2000))
    scores, counters, cache, maps = PeerScores(ban_threshold=3), Counter[str](), VerifyCache(), _HeldMaps()
    rules = AdmissionRules(swarm_id=SWARM, me=pid(ME), seed=SEED)
    inbox = Inbox(rules, machine, GAME, opener=cache, scores=scores, counters=counters, peer_numbers=maps)
    inbox.open_round(ROUND, 0, connected=0)
    honest = batch_envelope(ALICE)
    assert isinstance(fetch_announced(inbox, ALICE, honest), Accept)
    forged = batch_envelope(BOB, groups=groups_for(pid(BOB), forge=True))
    assert fetch_announced(inbox, BOB, forged) == Reject("forged_reward", pid(BOB))
    assert scores.is_banned(pid(BOB)) and scores.valid[pid(ALICE)] == 1
    assert counters["accepted_batches"] == 1
    assert cache.misses > 0
    assert maps.made_rounds == [{pid(ALICE): ROUND, pid(BOB): ROUND}]
    assert maps.made_digests[-1] == {
        pid(ALICE): hashlib.sha256(honest).digest(),
        pid(BOB): hashlib.sha256(forged).digest(),
    }


def test_an_announcement_of_exactly_the_size_cap_is_taken() -> None:
    data = announce(ALICE, batch_envelope(ALICE))
    inbox = make_inbox(max_announce_bytes=len(data))
    assert isinstance(inbox.heard(pid(ALICE), data), Fetch)


def test_an_announcement_opened_once_for_many_receivers_is_decided_as_if_each_opened_it() -> None:
    """The simulator opens a gossiped message once for all its receivers in a process: each
    inbox's decision is the one it makes opening the message itself."""
    good = announce(ALICE, batch_envelope(ALICE))
    shared = SharedOpen(good)
    for _ in range(2):
        inbox = make_inbox()
        assert isinstance(inbox.heard(pid(ALICE), good, shared), Fetch)
    garbled = SharedOpen(b"\x93not an envelope")
    alone = make_inbox().heard(pid(BOB), garbled.data)
    assert isinstance(alone, Reject) and make_inbox().heard(pid(BOB), garbled.data, garbled) == alone


def test_an_established_senders_next_round_announcement_is_held_past_the_unknown_allowance() -> None:
    """The next-round allowance limits unknown keys only: a connected peer's early announcement
    is held even once throwaway keys used the allowance up."""
    inbox = make_inbox(max_early_unknown=1)
    inbox.peers_connected([pid(BOB)])
    stranger = signer(7)
    assert inbox.heard(
        pid(stranger), announce(stranger, batch_envelope(stranger, ROUND + 1), round_number=ROUND + 1)
    ) == Hold(ROUND + 1)
    bobs = announce(BOB, batch_envelope(BOB, ROUND + 1), round_number=ROUND + 1)
    assert inbox.heard(pid(BOB), bobs) == Hold(ROUND + 1)


@settings(max_examples=25)
@given(
    max_fetch=st.integers(4, 24),
    share=st.sampled_from([0.0, 0.1, 0.25, 0.5]),
    max_early=st.integers(1, 3),
    rounds=st.lists(st.sampled_from([ROUND, ROUND + 1]), max_size=8),
)
def test_the_unknown_budget_is_full_exactly_when_a_new_unknown_key_would_be_refused(
    max_fetch: int, share: float, max_early: int, rounds: list[int]
) -> None:
    """Fetcher.announced refreshes the connected peers when this says full (before an unknown
    sender is refused) and the simulator's fast path hands unknown senders to the full rules:
    the answer must be true whenever a fresh key's announcement, for this round or the next,
    would be refused, and false while there is room for both."""
    inbox = make_inbox(max_fetch_per_round=max_fetch, unknown_fetch_share=share, max_early_unknown=max_early)
    newcomer = signer(1000)

    def refused(round_number: int) -> bool:
        # The round's fetch draw is shared, not copied: it holds a hash state (not copyable)
        # and is only ever read.
        draw = inbox.current.fetch_draw if inbox.current is not None else None
        probe = copy.deepcopy(inbox, {id(draw): draw})
        data = announce(newcomer, batch_envelope(newcomer, round_number), round_number=round_number)
        decision = probe.heard(pid(newcomer), data)
        return decision in (Reject("fetch_unknown_limit", None), Reject("future_round_limit", None))

    for i, round_number in enumerate([*rounds, None]):
        assert inbox.unknown_budget_full() == (refused(ROUND) or refused(ROUND + 1))
        if round_number is not None:
            k = signer(i)
            inbox.heard(pid(k), announce(k, batch_envelope(k, round_number), round_number=round_number))


def test_next_round_announcements_are_fetched_when_it_opens_and_free_the_unknown_allowance() -> None:
    """Announcements that beat our own poll to the next round are not lost: once it opens they
    are considered (in sender order), and the unknown keys' allowance they used is freed."""
    inbox = make_inbox(max_early_unknown=1)
    unknown = {k: batch_envelope(k, ROUND + 1) for k in (ALICE, BOB)}
    assert inbox.heard(pid(ALICE), announce(ALICE, unknown[ALICE], round_number=ROUND + 1)) == Hold(ROUND + 1)
    assert inbox.unknown_budget_full()
    assert inbox.heard(pid(BOB), announce(BOB, unknown[BOB], round_number=ROUND + 1)) == Reject(
        "future_round_limit", None
    )
    inbox.machine.handle(2000, RoundOpened(ROUND + 1, collect_until_ms=3000, round_ends_ms=4000))
    inbox.open_round(ROUND + 1, 0, connected=0)
    released = inbox.release_early(ROUND + 1)
    assert [type(d) for d in released] == [Fetch]
    assert released[0].job.sender == pid(ALICE)  # type: ignore[union-attr]
    assert not inbox.unknown_budget_full()
    assert inbox.release_early(ROUND + 1) == []  # each held announcement is released once


# ---- the DHT sweep -----------------------------------------------------------------------------


def test_a_peer_heard_from_exactly_known_peer_rounds_ago_is_still_swept_for() -> None:
    inbox = make_inbox(known_peer_rounds=10)
    inbox.known[pid(ALICE)] = ROUND - 10
    inbox.known[pid(BOB)] = ROUND - 11
    assert [job.sender for job in inbox.sweep([])] == [pid(ALICE)]


@settings(max_examples=20)
@given(peers=st.integers(2, 24), sample=st.integers(1, 12), connected=st.integers(1, 60))
def test_the_sweep_looks_up_exactly_the_silent_peers_it_would_have_fetched(
    peers: int, sample: int, connected: int
) -> None:
    """Under fetch sampling the sweep looks up a silent peer only when its draw would have had
    its announcement fetched; each lookup is counted once."""
    inbox = make_inbox(fetch_sample=sample, max_fetch_per_round=1000)
    state = inbox.open_round(ROUND, 0, connected=connected)
    names = sorted(pid(signer(i)) for i in range(peers))
    for name in names:
        inbox.known[name] = ROUND - 1
    jobs = list(inbox.sweep([]))
    drawn = [n for n in names if fetch_priority(SEED, ROUND, pid(ME), n) < state.fetch_probability]
    assert [job.sender for job in jobs] == drawn
    assert inbox.counters["sweep_lookups"] == len(drawn)


def test_the_sweep_stays_within_the_rounds_fetch_limit() -> None:
    inbox = make_inbox(max_fetch_per_round=2)
    for i in range(5):
        inbox.known[pid(signer(i))] = ROUND - 1
    jobs = []
    for job in inbox.sweep([]):
        inbox.queued(job)  # as the runtime does, before the next one is decided
        jobs.append(job)
    assert len(jobs) == 2 and inbox.counters["sweep_lookups"] == 2
    assert list(inbox.sweep([])) == []  # the limit is reached: no more lookups this round


def test_a_fetch_for_another_stage_than_the_one_collecting_is_not_started() -> None:
    inbox = make_inbox()
    job = job_for(RolloutAnnouncement(SWARM, ROUND, 0, pid(ALICE), b"\0" * 32, 2, 10))
    assert inbox.may_fetch(job)
    assert not inbox.may_fetch(attrs.evolve(job, stage=1)) and inbox.rejections["late"] == 1
