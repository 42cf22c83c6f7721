"""Protocol rules a plausible bug would bend without any other test noticing: the critics'
majority tie-break, later stages' item cap and blame, which stage's batches a later stage takes,
the stale-round rule while a skipped round is current, a deferred fetch's top-up after the
collect window, one vote per round, and the schedule's consistency checks. Each test fails on
the bug named in its docstring (checked by hand-made mutants and scripts/mutation.sh)."""

from __future__ import annotations

import math
import struct

import attrs
import msgpack
import pytest

from protocol import codec
from protocol.acr import (
    CRITIQUE,
    RESOLVE,
    InputRef,
    InputStore,
    StageItem,
    Stored,
    digest_prefix,
    parse_pick,
    score_item,
)
from protocol.admission import Accept, Defer, Fetch, Reject, fetch_probability
from protocol.deferred import DeferredStore
from protocol.envelope import seal
from protocol.errors import ProtocolError
from protocol.fetch_draw import fetch_priority, priority_of_digest
from protocol.games import GAME_NAMES, REGISTRY, make_game, spec_of
from protocol.logprobs import MAX_LOGPROBS_BYTES
from protocol.messages import (
    PROTOCOL_VERSION,
    Completion,
    Hello,
    QuestionGroup,
    QuestionRef,
    RolloutAnnouncement,
    RolloutBatch,
    SwarmSchedule,
)
from protocol.rounds import (
    AbandonRound,
    CoordinatorSaid,
    Idle,
    IllegalTransition,
    Report,
    RolloutsReady,
    RoundMachine,
    RoundOpened,
    RoundTiming,
    SkipRound,
    StagePlan,
    SweepDht,
    Tick,
    TrainingFinished,
    learn_stage_ms,
    too_late_to_start,
)
from protocol.scoring import PeerScores
from protocol.seeds import unit_interval
from protocol.stage_schedule import StageSchedule
from protocol.verification import Verdict, VerificationLimits, group_shape_error, verify_batch
from swarmp2p.rules import peer_settings_for
from tests.helpers.inbox import ROUND as INBOX_ROUND
from tests.helpers.inbox import announce, batch_envelope, make_inbox
from tests.protocol.test_protocol_acr import (
    ALICE,
    BOB,
    CAROL,
    GAME,
    ME,
    ROUND,
    RULES,
    SWARM,
    acr_inbox,
    answers,
    fetch,
    honest_batch,
    pid,
    sealed,
    store_with_answers,
)

# ---- answer -> critique -> resolve: the later stages ---------------------------------------


@pytest.mark.parametrize(
    ("picks", "majority"),
    [
        ((2, 1, 2, 1), 1),  # a tie goes to the lowest candidate...
        ((3, 3, 1, 1, 2), 1),
        ((3, 3, 1), 3),  # ...never past a strict majority
        ((0, 9, 2), 2),  # picks outside 1..candidates do not count
        ((), 0),
    ],
)
def test_the_critics_majority_ties_to_the_lowest_candidate(picks: tuple[int, ...], majority: int) -> None:
    """Bug: a tie broken to the highest (or first-seen) candidate: every resolver would be shown
    another "majority pick" than its verifiers re-derive."""
    item = StageItem(RESOLVE, QuestionRef("a", 1, 0), QuestionRef("echo", 1, 1), ("a", "b", "c"), picks)
    assert item.majority() == majority


def store_through_critiques(*critics: bytes) -> InputStore:
    """Stage-0 answers of Alice, Bob and Carol, and an honest critique by each of `critics`, as a
    peer holds them when the resolve stage opens."""
    store = store_with_answers(ALICE, BOB, CAROL)
    for critic in critics:
        items = GAME.items(ROUND, CRITIQUE, pid(critic), store)
        critique = honest_batch(critic, CRITIQUE, items)
        store.add(sealed(critique, critic)[1], critique, items)
    return store


def test_a_resolve_batch_is_held_to_the_item_cap() -> None:
    """Bug: the later stages' cap (`questions_per_round` items) not applied at stage 2, so a
    peer could claim more resolve groups (and more of the swarm's training) than it is owed."""
    store = store_through_critiques(BOB, CAROL)
    wider = attrs.evolve(GAME, answer=attrs.evolve(RULES, questions_per_round=3))
    too_many = wider.items(ROUND, RESOLVE, pid(ALICE), store)
    assert len(too_many) == 3 and len(GAME.items(ROUND, RESOLVE, pid(ALICE), store)) == 2
    over = honest_batch(ALICE, RESOLVE, too_many)
    assert fetch(acr_inbox(store, RESOLVE), ALICE, over) == Reject("too_many_groups", pid(ALICE))
    within = honest_batch(ALICE, RESOLVE, too_many[:2])
    assert isinstance(fetch(acr_inbox(store, RESOLVE), ALICE, within), Accept)


def test_bad_references_in_the_resolve_stage_are_blamed_and_missing_ones_are_not() -> None:
    """Bug: stage 2's reference checks dropped or blamed differently from stage 1's."""
    store = store_through_critiques(BOB, CAROL)
    honest = honest_batch(ALICE, RESOLVE, GAME.items(ROUND, RESOLVE, pid(ALICE), store))
    group = honest.groups[0]
    ref = InputRef.of(group.question)

    def with_ref(new: InputRef) -> RolloutBatch:
        return attrs.evolve(honest, groups=(attrs.evolve(group, question=new.question()),))

    cases = {
        "input_mismatch": (with_ref(attrs.evolve(ref, prefix=ref.prefix ^ 1)), pid(ALICE)),
        "bad_input": (with_ref(attrs.evolve(ref, group=7)), pid(ALICE)),
        "missing_input": (with_ref(attrs.evolve(ref, author=pid(ME))), None),  # we hold no critique of ours
        "self_reference": (with_ref(attrs.evolve(ref, author=pid(ALICE))), pid(ALICE)),
    }
    for reason, (batch, blame) in cases.items():
        inbox = acr_inbox(store, RESOLVE)
        assert fetch(inbox, ALICE, batch) == Reject(reason, blame), reason
        assert inbox.scores.invalid[pid(ALICE)] == (1 if blame else 0), reason
    assert isinstance(fetch(acr_inbox(store, RESOLVE), ALICE, honest), Accept)


def test_a_resolve_builds_on_critiques_never_on_the_answers_before_them() -> None:
    """Bug: a later stage takes a batch of an earlier stage than the one before it (stage 0's
    answers at stage 2): items built on it, or a reference to it accepted."""
    store = store_through_critiques(BOB)
    critique = store.get(ROUND, CRITIQUE, pid(BOB))
    assert critique is not None
    items = GAME.items(ROUND, RESOLVE, pid(ME), store)
    assert items
    for item in items:
        ref = InputRef.of(item.ref)
        assert (ref.author, ref.prefix) == (pid(BOB), digest_prefix(critique.digest))
    # A resolve group naming Bob's stage-0 answer batch (its true digest) is refused.
    bobs_answers = answers(BOB)
    to_answers = InputRef(pid(BOB), digest_prefix(sealed(bobs_answers, BOB)[1]), 0)
    honest = honest_batch(ALICE, RESOLVE, items[:1])
    wrong = attrs.evolve(honest, groups=(attrs.evolve(honest.groups[0], question=to_answers.question()),))
    assert fetch(acr_inbox(store, RESOLVE), ALICE, wrong) == Reject("input_mismatch", pid(ALICE))


def test_a_previous_stages_batch_is_not_taken_in_a_later_stage() -> None:
    """Bug: while stage 1 collects, stage 0's announcements (or a stage-0 batch served for a
    stage-1 fetch) are taken as this stage's."""
    store = store_with_answers(ALICE, BOB, CAROL)
    inbox = acr_inbox(store, CRITIQUE)
    late = answers(CAROL)
    envelope, digest = sealed(late, CAROL)
    old_stage = RolloutAnnouncement(SWARM, ROUND, 0, pid(CAROL), digest, len(late.groups), len(envelope))
    assert inbox.heard(pid(CAROL), seal(old_stage, CAROL)) == Reject("wrong_stage", None)
    # Announced for stage 1, served a (valid, signed) stage-0 batch.
    critique = honest_batch(ALICE, CRITIQUE, GAME.items(ROUND, CRITIQUE, pid(ALICE), store))
    stage_one = RolloutAnnouncement(
        SWARM, ROUND, CRITIQUE, pid(ALICE), digest, len(late.groups), len(envelope)
    )
    decision = inbox.heard(pid(ALICE), seal(stage_one, ALICE))
    assert isinstance(decision, Fetch)
    served = seal(answers(ALICE), ALICE)
    job = attrs.evolve(decision.job, digest=b"")  # judged on what it is, not on its digest
    assert inbox.fetched(job, served, direct=True) == Reject("batch_mismatch", pid(ALICE))
    assert critique.stage == CRITIQUE and inbox.current is not None and inbox.current.external == {}


# ---- the round machine and the inbox -------------------------------------------------------


def test_announcements_for_the_round_in_hand_are_stale_once_a_newer_round_was_skipped() -> None:
    """Bug: the single-stage position ignores the skipped round (takes only the open one), so
    the round in hand keeps fetching after the swarm moved past it."""
    machine = RoundMachine()
    machine.handle(0, CoordinatorSaid(INBOX_ROUND, 0, 1, 10_000, stage_ms=10_000))
    skip = machine.handle(19_000, CoordinatorSaid(INBOX_ROUND + 1, 0, 1, 20_000, stage_ms=10_000))
    assert skip == (SkipRound(INBOX_ROUND + 1, 0, 1_000),)
    assert machine.current_position() == (INBOX_ROUND + 1, 0)
    inbox = make_inbox()
    inbox.machine = machine  # still in the round it opened, which is no longer current
    inbox.open_round(INBOX_ROUND, 0, connected=0)
    envelope = batch_envelope(ALICE)
    assert inbox.heard(pid(ALICE), announce(ALICE, envelope)) == Reject("stale_round", None)
    assert inbox.scores.invalid[pid(ALICE)] == 0


def test_a_deferred_fetch_is_not_topped_up_once_collecting_ends() -> None:
    """Bug: `top_up` hands out a deferred fetch after the collect window (its batch would come
    too late to train on, and take a fetch slot of the next round's work)."""
    inbox = make_inbox(fetch_sample=1)
    inbox.open_round(INBOX_ROUND, 0, connected=400)  # fetch about 1 in 400: nearly every one deferred
    deferred = []
    for i in range(8):
        signer = bytes([i]) * 32
        decision = inbox.heard(pid(signer), announce(signer, batch_envelope(signer)))
        if isinstance(decision, Defer):
            deferred.append(decision)
    assert len(deferred) >= 2
    assert isinstance(inbox.top_up(INBOX_ROUND), Fetch)  # while collecting: the next deferred one
    inbox.machine.handle(1000, RolloutsReady(INBOX_ROUND))
    inbox.machine.handle(1000, Tick())  # the collect deadline (make_inbox: 1000 ms)
    assert not inbox.machine.collecting(INBOX_ROUND)
    assert inbox.current is not None and inbox.current.deferred  # deferred ones are left...
    assert inbox.top_up(INBOX_ROUND) is None  # ...and not fetched


def play_round(machine: RoundMachine, round_number: int, stages: int, at: int) -> list[Report]:
    """Every stage of `round_number` through the machine; the Reports it emits."""
    reports: list[Report] = []
    for stage in range(stages):
        start = at + stage * 1000
        actions = list(machine.handle(start, CoordinatorSaid(round_number, stage, stages, start + 1000)))
        actions += machine.handle(start + 10, RolloutsReady(round_number, stage))
        actions += machine.handle(start + 999, Tick())
        if machine.plan.trains(stage):
            actions += machine.handle(start + 999, TrainingFinished(round_number, stage))
        reports += [a for a in actions if isinstance(a, Report)]
    return reports


def test_winners_are_voted_once_a_round_at_the_games_voting_stage() -> None:
    """Bug: every stage's report votes (three votes a round for answer -> critique -> resolve)."""
    spec = REGISTRY[GAME.name]
    reports = play_round(RoundMachine(plan=spec.plan), ROUND, spec.stage_count, 0)
    assert [(r.stage, r.votes) for r in reports] == [
        (stage, stage == spec.vote_stage) for stage in range(spec.stage_count)
    ]
    single = RoundMachine()
    assert [r.votes for r in play_round(single, ROUND, 1, 0) + play_round(single, ROUND + 1, 1, 1000)] == [
        True,
        True,
    ]


# ---- the schedule ----------------------------------------------------------------------------


def schedule(**fields: object) -> SwarmSchedule:
    base = {
        "swarm_id": SWARM,
        "genesis_ms": 0,
        "round_ms": 60_000,
        "stage_count": 1,
        "seed": 1,
        "tasks": ("a", "b", "c"),
        "weights": (1.0, 2.0, 3.0),
    }
    return SwarmSchedule(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize("weights", [(1.0, 2.0), (1.0, 2.0, 3.0, 4.0)])
def test_a_schedule_with_a_weight_count_other_than_its_tasks_is_refused(weights: tuple[float, ...]) -> None:
    """Bug: only more weights than tasks refused; fewer would leave peers disagreeing on the mix."""
    hello = Hello(PROTOCOL_VERSION, pid(ALICE), schedule(), -1, (), "tiny")
    assert codec.decode(codec.encode(hello)) == hello
    with pytest.raises(ProtocolError) as refused:
        codec.encode(attrs.evolve(hello, schedule=schedule(weights=weights)))
    assert refused.value.reason == "inconsistent"
    # Received from a peer that does not check: refused on decode too.
    top = msgpack.unpackb(codec.encode(hello))
    top["b"]["schedule"]["weights"] = list(weights)
    with pytest.raises(ProtocolError) as refused:
        codec.decode(msgpack.packb(top, use_bin_type=True))
    assert refused.value.reason == "inconsistent"


@pytest.mark.parametrize("stage_count", [2, 4, 5])
def test_a_multi_stage_game_needs_exactly_its_own_stage_count(stage_count: int) -> None:
    """Bug: a schedule with more stages than the game plays (4 for answer -> critique -> resolve)
    accepted: the game's stage 3 does not exist."""
    spec = REGISTRY[GAME.name]
    assert spec.stage_count == 3
    assert peer_settings_for(schedule(stage_count=3, game=spec.name)).game == spec.name
    with pytest.raises(ValueError, match="stages"):
        peer_settings_for(schedule(stage_count=stage_count, game=spec.name))


# ---- peer scores (the survivors of scripts/mutation.sh protocol/scoring.py) -----------------


def test_a_ban_keeps_the_reason_that_tipped_it_and_the_first_reason_given() -> None:
    scores = PeerScores(ban_threshold=2)
    assert scores.record_invalid("p", "duplicate") is False
    assert scores.record_invalid("p", "flood") is True  # this one banned
    assert scores.record_invalid("p", "oversized") is False  # already banned
    assert scores.ban_reasons == {"p": "flood"} and scores.is_banned("p")
    assert scores.ban("q", "forged_reward") is True
    assert scores.ban("q", "equivocation") is False  # the first reason is kept
    assert scores.ban("p", "forged_reward") is False
    assert scores.ban_reasons == {"p": "flood", "q": "forged_reward"}
    assert scores.banned == {"p", "q"} and scores.invalid["q"] == 0  # a ban on proof needs no count


def test_the_scores_summary_is_every_count_by_peer_and_reason() -> None:
    scores = PeerScores(ban_threshold=2)
    scores.record_valid("a")
    scores.record_valid("a")
    for peer, reason in (("b", "flood"), ("b", "flood"), ("c", "oversized")):
        scores.record_invalid(peer, reason)
    scores.ban("d", "equivocation")
    assert scores.summary() == {
        "valid": {"a": 2},
        "invalid": {"b": 2, "c": 1},
        "reasons": {"flood": 2, "oversized": 1},
        "banned": {"b": 2, "d": 0},
    }
    assert list(scores.summary()["banned"]) == ["b", "d"]
    assert scores.reasons_by_peer == {"b": {"flood": 2}, "c": {"oversized": 1}}


# ---- deferred announcements (the survivors of scripts/mutation.sh protocol/deferred.py) ------


def deferred_entry(priority: float, sender: str) -> Defer:
    return Defer(priority, RolloutAnnouncement(SWARM, ROUND, 0, sender, b"\1" * 32, 2, 100))


def test_a_store_without_top_ups_keeps_nothing() -> None:
    store = DeferredStore(0)
    for i in range(5):
        store.offer(deferred_entry(i / 10, f"p{i}"))
    assert not store and len(store) == 0 and store.take() is None


def test_an_offer_tied_with_the_cutoff_is_kept_and_ordered_by_sender() -> None:
    store = DeferredStore(1)
    store.offer(deferred_entry(0.5, "b"))
    store.offer(deferred_entry(0.7, "c"))  # the second offer trims: only (0.5, b) is kept
    assert store.cutoff == 0.5 and list(store) == ["b"]
    store.offer(deferred_entry(0.5, "a"))  # the same priority, a lower sender: it wins
    assert store.take() == deferred_entry(0.5, "a")
    assert store.take() is None  # one top-up at most


def test_the_store_reads_by_sender() -> None:
    store = DeferredStore(3)
    for priority, sender in ((0.3, "c"), (0.1, "a"), (0.2, "b"), (0.9, "z")):
        store.offer(deferred_entry(priority, sender))
    assert list(store) == ["a", "b", "c"] and len(store) == 3
    assert "b" in store and "z" not in store
    assert store["c"] == deferred_entry(0.3, "c")
    assert dict(store.items()) == {s: deferred_entry(p, s) for p, s in ((0.1, "a"), (0.2, "b"), (0.3, "c"))}
    with pytest.raises(KeyError) as missing:
        store["z"]
    assert missing.value.args == ("z",)


# ---- batch shape and re-scoring (the survivors of scripts/mutation.sh protocol/verification.py) --


def floats(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def shape(texts_and_logprobs: list[tuple[str, object]], limits: VerificationLimits) -> str | None:
    completions = tuple(Completion(text, 0.0, logprobs) for text, logprobs in texts_and_logprobs)  # type: ignore[arg-type]
    return group_shape_error(QuestionGroup(QuestionRef("echo", 1, 0), completions), limits)


def test_text_and_log_prob_caps_are_inclusive_and_counted_in_bytes() -> None:
    limits = VerificationLimits(max_text_bytes=4, max_logprobs=2)
    assert shape([("abcd", b""), ("éé", b"")], limits) is None  # 4 bytes each: at the cap
    assert shape([("abcd", b""), ("ééa", b"")], limits) == "text_too_long"  # 3 characters, 5 bytes
    assert shape([("a", floats(-0.5, -1.0)), ("b", floats(-2.0))], limits) is None  # 2 log-probs: at the cap
    assert shape([("a", floats(-0.5, -1.0, -1.5)), ("b", b"")], limits) == "logprobs_too_long"


@pytest.mark.parametrize(
    ("logprobs", "reason"),
    [
        (floats(-0.5)[:3], "bad_logprobs"),  # not a whole float32
        (floats(-0.5, 0.5), "bad_logprobs"),  # a probability above 1
        (floats(-0.5, math.nan), "bad_logprobs"),
        ([-0.5], "bad_logprobs"),  # not bytes at all
    ],
)
def test_malformed_log_probs_are_bad_not_too_long(logprobs: object, reason: str) -> None:
    assert shape([("a", logprobs), ("b", b"")], VerificationLimits()) == reason


def test_log_probs_past_the_wire_cap_are_too_long_even_under_a_looser_limit() -> None:
    looser = VerificationLimits(max_logprobs=MAX_LOGPROBS_BYTES // 4 + 10)
    at_wire_cap = floats(*([-0.5] * (MAX_LOGPROBS_BYTES // 4 - 1)), math.nan)  # at the cap, malformed
    past_wire_cap = floats(*([-0.5] * (MAX_LOGPROBS_BYTES // 4 + 1)))
    assert shape([("a", at_wire_cap), ("b", b"")], looser) == "bad_logprobs"
    assert shape([("a", past_wire_cap), ("b", b"")], looser) == "logprobs_too_long"


class RaisingOnSecond:
    """The echo task, whose scorer raises for question 1: our own bug, not the sender's."""

    def task_names(self) -> tuple[str, ...]:
        return ("echo",)

    def is_heldout(self, question: QuestionRef) -> bool:
        return False

    def score(self, question: QuestionRef, completion_text: str) -> float:
        if question.index == 1:
            raise RuntimeError("scorer bug")
        return 1.0 if completion_text == str(question.index) else 0.0


def test_a_scoring_error_says_how_many_groups_were_checked_and_a_claim_within_tolerance_passes() -> None:
    def group(index: int, claim: float) -> QuestionGroup:
        return QuestionGroup(
            QuestionRef("echo", 1, index), (Completion(str(index), claim), Completion("no", 0.0))
        )

    def verdict(*groups: QuestionGroup, tolerance: float = 1e-6) -> Verdict:
        batch = RolloutBatch(SWARM, ROUND, 0, "p", groups)
        return verify_batch(
            batch,
            RaisingOnSecond(),
            expected_questions=None,
            limits=VerificationLimits(),
            tolerance=tolerance,
        )

    assert verdict(group(0, 1.0), group(1, 1.0)) == Verdict(
        ok=False, reason="scoring_error", groups_checked=1
    )
    assert verdict(group(0, 0.75), tolerance=0.25).ok  # off by exactly the tolerance
    assert verdict(group(0, 0.7), tolerance=0.25) == Verdict(
        ok=False, reason="forged_reward", groups_checked=0
    )


# ---- later stages' rules (the survivors of scripts/mutation.sh protocol/acr.py, protocol/staged.py) --


def test_a_pick_is_the_number_in_a_final_answer_tag_or_none() -> None:
    assert parse_pick("I pick <answer> 2 </answer>") == 2
    assert parse_pick("no tag at all") == 0
    assert parse_pick("<answer>2</answer> then more words") == 0  # not final


def test_a_critique_earns_its_pick_up_to_the_last_candidate_and_a_resolve_its_own_answer() -> None:
    critique = StageItem(CRITIQUE, QuestionRef("a", 1, 0), QuestionRef("echo", 1, 7), ("no", "7"))
    assert score_item(critique, "<answer>2</answer>", RULES.registry) == 1.0  # the last candidate
    assert score_item(critique, "<answer>3</answer>", RULES.registry) == 0.0  # no such candidate
    resolve = StageItem(RESOLVE, QuestionRef("a", 1, 0), QuestionRef("echo", 1, 7), ("no", "7"), (2,))
    assert (
        score_item(resolve, "7", RULES.registry) == 1.0 and score_item(resolve, "no", RULES.registry) == 0.0
    )


def test_items_are_made_only_from_groups_that_exist_at_the_stage_that_takes_them() -> None:
    store = store_through_critiques(BOB)
    answers_of_carol = store.get(ROUND, 0, pid(CAROL))
    critique_of_bob = store.get(ROUND, CRITIQUE, pid(BOB))
    assert answers_of_carol is not None and critique_of_bob is not None
    groups = len(answers_of_carol.batch.groups)

    def ref(stored: Stored, group: int) -> InputRef:
        return InputRef(stored.batch.peer_id, digest_prefix(stored.digest), group)

    item = GAME.item_from(CRITIQUE, ref(answers_of_carol, 0), answers_of_carol)
    assert isinstance(item, StageItem) and item.stage == CRITIQUE
    assert item.candidates == tuple(c.text for c in answers_of_carol.batch.groups[0].completions)
    assert GAME.item_from(CRITIQUE, ref(answers_of_carol, groups), answers_of_carol) is None
    resolve = GAME.item_from(RESOLVE, ref(critique_of_bob, 0), critique_of_bob)
    assert isinstance(resolve, StageItem) and resolve.stage == RESOLVE
    critiqued = critique_of_bob.items[0]
    assert (resolve.question, resolve.candidates) == (critiqued.question, critiqued.candidates)
    assert GAME.item_from(0, ref(critique_of_bob, 0), critique_of_bob) is None  # stage 0 has no items
    assert GAME.item_from(3, ref(critique_of_bob, 0), critique_of_bob) is None
    # A critique batch stored with fewer items than groups: the group past them makes nothing.
    partial = InputStore()
    partial.add(critique_of_bob.digest, critique_of_bob.batch, critique_of_bob.items[:1])
    short = partial.get(ROUND, CRITIQUE, pid(BOB))
    assert short is not None and len(short.batch.groups) == 2
    assert GAME.item_from(RESOLVE, ref(short, 1), short) is None


def test_only_resolve_groups_are_renamed_for_the_trainer_and_the_counts_must_match() -> None:
    store = store_through_critiques(BOB, CAROL)
    items = GAME.items(ROUND, RESOLVE, pid(ALICE), store)
    batch = honest_batch(ALICE, RESOLVE, items)
    renamed = GAME.training_groups(RESOLVE, items, batch.groups)
    assert renamed == tuple(
        QuestionGroup(i.question, g.completions) for i, g in zip(items, batch.groups, strict=True)
    )
    assert GAME.training_groups(CRITIQUE, items, batch.groups) == batch.groups
    with pytest.raises(ValueError):
        GAME.training_groups(RESOLVE, items[:1], batch.groups)
    verify_game = make_game("answer-verify", RULES)
    assert verify_game.training_groups(1, items, batch.groups) == batch.groups


def test_items_follow_the_seeded_draw_and_skip_authors_too_long_to_reference() -> None:
    store = store_with_answers(ALICE, BOB, CAROL)
    for author in ("a" * 64, "b" * 65):  # a reference carries its author as a task name (64 bytes)
        batch = attrs.evolve(answers(ALICE), peer_id=author)
        store.add(b"\7" * 32, batch)
    wide = attrs.evolve(GAME, answer=attrs.evolve(RULES, questions_per_round=64))
    items = wide.items(ROUND, CRITIQUE, pid(ME), store)
    authors = {InputRef.of(item.ref).author for item in items}
    assert "a" * 64 in authors and "b" * 65 not in authors
    draws = [
        unit_interval(RULES.seed, ROUND, CRITIQUE, pid(ME), InputRef.of(i.ref).author, i.ref.index)
        for i in items
    ]
    assert draws == sorted(draws) and len(set(draws)) == len(draws)
    assert wide.items(ROUND, CRITIQUE, pid(BOB), store) != items  # another peer, another order
    assert GAME.builds_on_inputs(CRITIQUE) and GAME.builds_on_inputs(RESOLVE) and not GAME.builds_on_inputs(0)


def test_a_later_stage_batch_is_refused_for_exactly_its_reason() -> None:
    store = store_through_critiques(BOB, CAROL)
    items = GAME.items(ROUND, RESOLVE, pid(ALICE), store)
    honest = honest_batch(ALICE, RESOLVE, items)
    bad = Verdict(ok=False, reason="bad_input", groups_checked=0)
    assert GAME.resolve(attrs.evolve(honest, stage=3), store) == bad  # no stage 3
    broken = attrs.evolve(
        honest.groups[0], question=attrs.evolve(InputRef.of(honest.groups[0].question), group=9).question()
    )
    assert GAME.resolve(attrs.evolve(honest, groups=(broken,)), store) == bad
    assert GAME.verify(attrs.evolve(honest, groups=()), ()) == Verdict(False, "too_few_groups", 0)
    assert GAME.verify(honest, items[:1]) == Verdict(False, "missing_input", 0)
    lonely = attrs.evolve(honest.groups[0], completions=honest.groups[0].completions[:1])
    assert GAME.verify(attrs.evolve(honest, groups=(lonely,)), items[:1]) == Verdict(
        False, "bad_group_size", 0
    )
    trusting = attrs.evolve(GAME, answer=attrs.evolve(RULES, rescore=False))
    assert trusting.verify(honest, items) == Verdict(ok=True, reason=None, groups_checked=0)
    assert GAME.verify(honest, items) == Verdict(ok=True, reason=None, groups_checked=len(items))


def test_the_inputs_a_later_batch_needs_are_the_previous_stages_batches_we_lack() -> None:
    store = store_through_critiques(BOB, CAROL)
    resolve = honest_batch(ALICE, RESOLVE, GAME.items(ROUND, RESOLVE, pid(ALICE), store))
    authors = sorted({InputRef.of(g.question).author for g in resolve.groups})
    assert GAME.inputs_needed(resolve, store) == ()  # we hold both critiques
    held_answers_only = store_with_answers(ALICE, BOB, CAROL)  # the same authors, stage 0 only
    assert GAME.inputs_needed(resolve, held_answers_only) == tuple((ROUND, CRITIQUE, a) for a in authors)
    assert GAME.inputs_needed(attrs.evolve(resolve, stage=3), InputStore()) == ()
    assert GAME.inputs_needed(answers(ALICE), InputStore()) == ()


def test_our_own_batch_is_remembered_as_an_input() -> None:
    """With the items it answered: a peer's resolve built on our critique is checked against them."""
    store = store_with_answers(ALICE, BOB, CAROL)
    items = GAME.items(ROUND, CRITIQUE, pid(ALICE), store)
    critique = honest_batch(ALICE, CRITIQUE, items)
    digest = sealed(critique, ALICE)[1]
    GAME.remember(store, digest, critique, items)
    stored = store.get(ROUND, CRITIQUE, pid(ALICE))
    assert stored is not None and (stored.digest, stored.batch, tuple(stored.items)) == (
        digest,
        critique,
        items,
    )
    resolve = honest_batch(BOB, RESOLVE, GAME.items(ROUND, RESOLVE, pid(BOB), store))
    assert resolve.groups and GAME.verify(resolve, GAME.resolve(resolve, store)).ok  # type: ignore[arg-type]


# ---- the round machine's rules (the survivors of scripts/mutation.sh protocol/rounds.py) -------


def test_timing_fractions_and_event_fields_are_validated_with_their_names() -> None:
    assert RoundTiming(collect_fraction=1.0, sweep_fraction=0.0).collect_fraction == 1.0
    with pytest.raises(ValueError, match=r"^collect_fraction must be in \[0, 1\], got 1\.5$"):
        RoundTiming(collect_fraction=1.5)
    with pytest.raises(ValueError, match=r"^round must be a non-negative int, got -1$"):
        RoundOpened(-1, 0, 0)


def test_a_one_stage_plan_trains_and_votes_at_whatever_stage_a_staged_one_only_at_its_own() -> None:
    single, staged = StagePlan(), StagePlan(3, frozenset({0, 2}), 2)
    assert single.trains(1) and single.votes(1) and not single.staged
    assert [staged.trains(s) for s in range(3)] == [True, False, True]
    assert [staged.votes(s) for s in range(3)] == [False, False, True]


def said(round_number: int, stage: int, ends_ms: int, stage_count: int = 3) -> CoordinatorSaid:
    return CoordinatorSaid(round_number, stage, stage_count, ends_ms)


def test_the_stage_length_is_learned_from_two_answers_stages_apart() -> None:
    learned = learn_stage_ms(None, said(3, 1, 10_000), said(4, 0, 16_000))  # 2 stages apart
    assert learned == 3000 and type(learned) is int
    assert learn_stage_ms(2500, said(3, 1, 10_000), said(4, 0, 16_000)) == 2500  # the smallest is kept
    assert learn_stage_ms(None, said(3, 1, 10_000), said(3, 2, 10_001)) == 1
    assert learn_stage_ms(None, said(3, 1, 10_000), said(3, 2, 10_000)) is None  # no time between: nothing
    assert learn_stage_ms(7, said(3, 1, 10_000), said(3, 1, 12_000)) == 7  # the same stage


def test_too_late_to_start_is_strictly_less_than_the_share_left() -> None:
    assert not too_late_to_start(500, 1000, 1000, 0.5)  # exactly half left
    assert too_late_to_start(501, 1000, 1000, 0.5)
    assert not too_late_to_start(1500, 1000, 1000, 0.0)  # 0: never skip, even past the end
    assert not too_late_to_start(900, 1000, None, 0.5)  # stage length unknown


def test_too_late_to_start_counts_a_known_generation_only_against_the_collect_deadline() -> None:
    """A stage from 0 to 1000 ms. A generation of `generate_ms` (measured; 0: not known) must end
    before the collect deadline, `collect_fraction` of the stage in (the stage's end by default)."""
    assert too_late_to_start(400, 1000, 1000, 0.5, generate_ms=700)  # would publish at 1100: past the end
    assert not too_late_to_start(400, 1000, 1000, 0.5, generate_ms=500)  # publishes at 900
    assert too_late_to_start(999, 1000, 1000, 0.001, generate_ms=1)  # even 1 ms is a known generation
    assert not too_late_to_start(999, 1000, 1000, 0.001)  # not known: only the share left decides
    # not known, with the collect deadline (500) already passed: still only the share decides
    assert not too_late_to_start(600, 1000, 1000, 0.3, generate_ms=0, collect_fraction=0.5)
    assert too_late_to_start(300, 1000, 1000, 0.3, generate_ms=300, collect_fraction=0.5)  # 600 > 500


def test_illegal_events_say_what_they_were() -> None:
    machine = RoundMachine()
    machine.handle(0, RoundOpened(2, 500, 1000))
    with pytest.raises(IllegalTransition, match=r"^RolloutsReady\(3, 0\) for a round never opened"):
        machine.handle(1, RolloutsReady(3))
    with pytest.raises(IllegalTransition, match=r"^TrainingFinished is not allowed in phase GENERATING"):
        machine.handle(1, TrainingFinished(2))


def test_a_staged_machine_abandons_sweeps_and_skips_by_stage() -> None:
    machine = RoundMachine(plan=StagePlan(3, frozenset({0, 2}), 2))
    machine.handle(0, CoordinatorSaid(ROUND, 0, 3, 1000, stage_ms=1000))
    machine.handle(1000, CoordinatorSaid(ROUND, 1, 3, 2000, stage_ms=1000))
    assert machine.handle(1400, Idle()) == (SweepDht(ROUND, 1),)
    opened = machine.handle(2000, CoordinatorSaid(ROUND, 2, 3, 3000, stage_ms=1000))
    assert opened[0] == AbandonRound(ROUND, 1)
    assert machine.handle(3900, CoordinatorSaid(ROUND + 1, 0, 3, 4000, stage_ms=1000)) == (
        SkipRound(ROUND + 1, 0, 100),
    )
    assert machine.current_position() == (ROUND + 1, 0)
    assert machine.handle(4950, CoordinatorSaid(ROUND + 1, 1, 3, 5000, stage_ms=1000)) == (
        SkipRound(ROUND + 1, 1, 50),
    )
    assert machine.handle(4960, CoordinatorSaid(ROUND + 1, 1, 3, 5000, stage_ms=1000)) == ()  # once
    assert machine.current_position() == (ROUND + 1, 1)
    one = RoundMachine()
    one.handle(0, CoordinatorSaid(ROUND, 0, 1, 1000, stage_ms=1))
    assert one.stage_ms == 1  # a published stage length of 1 ms is taken as it is


def test_the_round_is_over_only_once_its_end_is_known_and_reached() -> None:
    machine = RoundMachine()
    machine.handle(0, RoundOpened(1, 0, 0))  # no end known
    assert not machine.round_over(0)
    machine.handle(0, RoundOpened(2, 1, 1))
    assert machine.round_over(1) and not machine.round_over(0)
    assert machine.collecting(2) and not machine.collecting(2, 1)  # stage 0 unless said


def test_the_wake_up_is_cut_short_by_a_stage_end_now_and_never_sooner_than_a_ms() -> None:
    machine = RoundMachine()
    machine.handle(0, CoordinatorSaid(ROUND, 0, 1, 1000))
    assert machine.wake_at_ms(1000, 5000) == 1001  # the stage ends now
    fresh = RoundMachine()
    fresh.handle(0, RoundOpened(ROUND, 800, 1000, sweep_at_ms=300))
    assert fresh.wake_at_ms(300, 5000) == 5300  # the sweep is due now: the runtime sweeps, no wait for it
    assert fresh.wake_at_ms(200, 5000) == 300
    fresh.handle(300, RolloutsReady(ROUND))
    assert fresh.wake_at_ms(900, 5000) == 901  # the collect deadline has passed


class RaisingRegistry:
    def task_names(self) -> tuple[str, ...]:
        return ("echo",)

    def is_heldout(self, question: QuestionRef) -> bool:
        return False

    def score(self, question: QuestionRef, completion_text: str) -> float:
        raise RuntimeError("scorer bug")


def test_a_later_stage_verdict_says_scoring_error_forgery_and_tolerance_exactly() -> None:
    store = store_with_answers(ALICE, BOB, CAROL)
    items = GAME.items(ROUND, CRITIQUE, pid(ALICE), store)
    honest = honest_batch(ALICE, CRITIQUE, items)
    broken = attrs.evolve(GAME, answer=attrs.evolve(RULES, registry=RaisingRegistry()))
    assert broken.verify(honest, items) == Verdict(ok=False, reason="scoring_error", groups_checked=0)
    second = honest.groups[1]
    claims = [attrs.evolve(c, reward=1.0 - c.reward) for c in second.completions]  # every claim flipped
    forged = attrs.evolve(honest, groups=(honest.groups[0], attrs.evolve(second, completions=tuple(claims))))
    assert GAME.verify(forged, items) == Verdict(ok=False, reason="forged_reward", groups_checked=1)
    loose = attrs.evolve(GAME, answer=attrs.evolve(RULES, tolerance=0.25))
    edge = [attrs.evolve(c, reward=abs(c.reward - 0.25)) for c in second.completions]  # off by exactly 0.25
    at_tolerance = attrs.evolve(
        honest, groups=(honest.groups[0], attrs.evolve(second, completions=tuple(edge)))
    )
    assert loose.verify(at_tolerance, items).ok


# ---- clocks, draws and the game registry (survivors of stage_schedule, fetch_draw, games) -----


def test_a_stage_schedule_places_time_after_its_genesis() -> None:
    clock = StageSchedule(genesis_ms=10_000, stage_ms=1000, stage_count=3)
    assert clock.position(9_000) == (0, 0)  # before genesis
    assert [clock.position(t) for t in (10_000, 12_999, 13_000, 15_999, 16_000)] == [
        (0, 0),
        (0, 2),
        (1, 0),
        (1, 2),
        (2, 0),
    ]
    assert StageSchedule(genesis_ms=0, stage_ms=1, stage_count=2).position(0) == (0, 0)
    ends = clock.stage_ends_ms(1, 2)
    assert ends == 16_000 and type(ends) is int
    assert clock.stage_ends_ms(0, 0) == 11_000
    assert clock.stages_between((1, 2), (3, 1)) == 5
    assert clock.stages_between((1, 1), (1, 1)) == 0 and clock.stages_between((3, 1), (1, 2)) == 0
    assert clock.stages_between((0, 1), (0, 2)) == 1


def test_the_fetch_draw_is_the_seeded_unit_interval_of_the_receivers_round() -> None:
    for sender in ("alice", "bob"):
        assert fetch_priority(11, 5, "me", sender) == unit_interval(11, 5, "me", sender, "fetch")
    assert priority_of_digest(b"\x80" + b"\x00" * 31) == 0.5
    assert priority_of_digest(b"\xff" * 32) == (2**63 - 1) / 2**63


def test_games_by_name_are_built_on_the_swarms_rules() -> None:
    assert make_game("answer-verify", RULES).answer == RULES
    with pytest.raises(ValueError) as unknown:
        spec_of("nope")
    assert str(unknown.value) == f"unknown game 'nope' (known: {', '.join(GAME_NAMES)})"
    assert GAME_NAMES[:2] == ("single", "answer-critique-resolve")


# ---- the inbox's bookkeeping (survivors of scripts/mutation.sh protocol/admission.py) ----------


def test_rejections_are_counted_per_round_and_per_reason_with_strikes_and_bans() -> None:
    inbox = make_inbox()
    for _ in range(2):
        inbox.reject("duplicate", blame=pid(ALICE))
    inbox.reject("forged_reward", blame=pid(BOB))
    assert inbox.current is not None and inbox.current.rejected == {"duplicate": 2, "forged_reward": 1}
    assert inbox.rejections == {"duplicate": 2, "forged_reward": 1}
    assert inbox.scores.reasons_by_peer[pid(ALICE)] == {"duplicate": 2}
    assert inbox.scores.ban_reasons == {pid(BOB): "forged_reward"}  # proof of lying: banned at once
    fresh = make_inbox()
    fresh.current = None  # no round open yet
    assert fresh.reject("late", blame=None) == Reject("late", None) and fresh.rejections == {"late": 1}


def test_queued_fetches_count_against_their_own_round_only() -> None:
    inbox = make_inbox()
    envelope = batch_envelope(ALICE)
    decision = inbox.heard(pid(ALICE), announce(ALICE, envelope))
    assert isinstance(decision, Fetch)
    inbox.queued(decision.job)
    inbox.queued(decision.job)
    inbox.queued(attrs.evolve(decision.job, round=INBOX_ROUND + 1))
    assert inbox.current is not None and inbox.current.fetches == 2


def test_an_unreadable_announcement_is_refused_with_its_reason_and_blamed() -> None:
    inbox = make_inbox()
    decision = inbox.heard(pid(ALICE), b"\x93not an envelope")
    assert isinstance(decision, Reject) and decision.blame == pid(ALICE) and decision.reason
    assert inbox.rejections[decision.reason] == 1 and inbox.scores.invalid[pid(ALICE)] == 1


def test_an_announcement_for_another_round_is_stale_when_considered() -> None:
    inbox = make_inbox()
    old = RolloutAnnouncement(SWARM, INBOX_ROUND - 1, 0, pid(ALICE), b"\1" * 32, 2, 100)
    assert inbox.consider(old, b"\2" * 32) == Reject("stale_round", None)
    assert inbox.scores.invalid[pid(ALICE)] == 0


def test_every_deferral_is_counted() -> None:
    inbox = make_inbox(fetch_sample=1)
    inbox.open_round(INBOX_ROUND, 0, connected=400)
    deferred = sum(isinstance(inbox.heard(*_announcement(i)), Defer) for i in range(10))
    assert deferred >= 5 and inbox.counters["fetch_deferred"] == deferred


def _announcement(i: int) -> tuple[str, bytes]:
    signer = bytes([i + 1]) * 32
    return pid(signer), announce(signer, batch_envelope(signer))


def test_the_fetch_probability_is_the_sample_over_the_connected_peers_at_most_one() -> None:
    assert fetch_probability(0, 10) == 1.0  # 0: fetch everything
    assert fetch_probability(5, 20) == 0.25
    assert fetch_probability(20, 10) == 1.0
    assert fetch_probability(1, 1) == 1.0 and fetch_probability(1, 0) == 1.0


def test_connected_peers_are_kept_as_a_frozen_set() -> None:
    inbox = make_inbox()
    inbox.peers_connected(["a", "b"])
    assert type(inbox.connected) is frozenset and inbox.connected == {"a", "b"}
    given = frozenset({"c"})
    inbox.peers_connected(given)
    assert inbox.connected is given
