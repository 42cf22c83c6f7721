"""The answer -> critique -> resolve game (protocol/acr.py): items re-derived from referenced
batches, every completion re-scored, forged critiques rejected with a reason and blame.

Pure: real signed envelopes, an InputStore, the admission Inbox and the round machine; no trio."""

from __future__ import annotations

import hashlib

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.acr import (
    CRITIQUE,
    RESOLVE,
    AnswerCritiqueResolveGame,
    InputRef,
    InputStore,
    StageItem,
    digest_prefix,
    parse_pick,
    score_item,
)
from protocol.admission import Accept, AdmissionRules, Fetch, Hold, Inbox, NeedInputs, Reject, job_for
from protocol.envelope import peer_id_from_seed, seal
from protocol.game import SingleStageGame
from protocol.games import GAME_NAMES, REGISTRY, make_game, stage_count_of
from protocol.messages import Completion, QuestionGroup, QuestionRef, RolloutAnnouncement, RolloutBatch
from protocol.rounds import CoordinatorSaid, Generate, RoundMachine, RoundOpened
from protocol.scoring import PeerScores
from tests.helpers.inbox import EchoRegistry

SWARM, SEED, ROUND = "acr", 5, 3


RULES = SingleStageGame(seed=SEED, tasks=("echo",), questions_per_round=2, registry=EchoRegistry())
GAME = AnswerCritiqueResolveGame(answer=RULES)


def key(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


ME, ALICE, BOB, CAROL = key("me"), key("alice"), key("bob"), key("carol")


def pid(seed: bytes) -> str:
    return peer_id_from_seed(seed)


def answers(signer: bytes) -> RolloutBatch:
    """An honest stage-0 batch: one right and one wrong answer per question."""
    groups = tuple(
        QuestionGroup(q, (Completion(str(q.index), 1.0), Completion("no", 0.0)))
        for q in GAME.questions(ROUND, 0, pid(signer))
    )
    return RolloutBatch(SWARM, ROUND, 0, pid(signer), groups)


def sealed(batch: RolloutBatch, signer: bytes) -> tuple[bytes, bytes]:
    envelope = seal(batch, signer)
    return envelope, hashlib.sha256(envelope).digest()


def honest_batch(signer: bytes, stage: int, items: tuple[StageItem, ...]) -> RolloutBatch:
    """Honest answers to `items`: a critique picks answer 1 then 2; a resolve answers right and wrong."""
    texts = ("<answer>1</answer>", "<answer>2</answer>") if stage == CRITIQUE else None
    groups = []
    for item in items:
        options = texts or (str(item.question.index), "no")
        groups.append(
            QuestionGroup(
                item.ref, tuple(Completion(t, score_item(item, t, RULES.registry)) for t in options)
            )
        )
    return RolloutBatch(SWARM, ROUND, stage, pid(signer), tuple(groups))


def store_with_answers(*signers: bytes) -> InputStore:
    store = InputStore()
    for signer in signers:
        batch = answers(signer)
        store.add(sealed(batch, signer)[1], batch)
    return store


def test_games_by_name() -> None:
    assert GAME_NAMES == ("single", "answer-critique-resolve", "answer-verify")
    assert make_game("single", RULES) is RULES
    assert make_game("answer-critique-resolve", RULES) == GAME
    assert [stage_count_of(name) for name in GAME_NAMES] == [1, 3, 2]
    assert GAME.trains(0) and not GAME.trains(1) and GAME.trains(2)


def test_stage_zero_is_the_single_game() -> None:
    assert GAME.questions(ROUND, 0, pid(ALICE)) == RULES.questions(ROUND, 0, pid(ALICE))
    assert GAME.questions(ROUND, 1, pid(ALICE)) == ()
    batch = answers(ALICE)
    assert GAME.verify(batch).ok and GAME.resolve(batch, InputStore()) == ()


def test_an_honest_round_verifies_at_every_stage() -> None:
    store = store_with_answers(ALICE, BOB, CAROL)
    items = GAME.items(ROUND, CRITIQUE, pid(ALICE), store)
    assert 0 < len(items) <= RULES.questions_per_round
    assert all(InputRef.of(item.ref).author != pid(ALICE) for item in items)  # never its own
    critique = honest_batch(ALICE, CRITIQUE, items)
    assert GAME.resolve(critique, store) == items  # the verifier re-derives the very same items
    assert GAME.verify(critique, items).ok
    store.add(sealed(critique, ALICE)[1], critique, items)

    resolve_items = GAME.items(ROUND, RESOLVE, pid(BOB), store)
    assert resolve_items and all(item.picks == (1, 2) for item in resolve_items)
    resolution = honest_batch(BOB, RESOLVE, resolve_items)
    assert GAME.resolve(resolution, store) == resolve_items
    assert GAME.verify(resolution, resolve_items).ok
    trained = GAME.training_groups(RESOLVE, resolve_items, resolution.groups)
    assert [g.question for g in trained] == [item.question for item in resolve_items]


def forged_critique(store: InputStore) -> RolloutBatch:
    items = GAME.items(ROUND, CRITIQUE, pid(ALICE), store)
    batch = honest_batch(ALICE, CRITIQUE, items)
    first = batch.groups[0]
    lie = attrs.evolve(first.completions[1], reward=1.0 - first.completions[1].reward)
    return attrs.evolve(batch, groups=(attrs.evolve(first, completions=(first.completions[0], lie)),))


def test_a_forged_critique_reward_is_rejected() -> None:
    store = store_with_answers(ALICE, BOB, CAROL)
    forged = forged_critique(store)
    items = GAME.resolve(forged, store)
    assert isinstance(items, tuple)
    assert GAME.verify(forged, items).reason == "forged_reward"


def acr_inbox(store: InputStore, stage: int) -> Inbox:
    machine = RoundMachine(plan=REGISTRY[GAME.name].plan)
    machine.handle(0, RoundOpened(ROUND, collect_until_ms=1000, round_ends_ms=2000, stage=stage))
    inbox = Inbox(AdmissionRules(swarm_id=SWARM, me=pid(ME), seed=SEED), machine, GAME, scores=PeerScores())
    inbox.store = store
    inbox.open_round(ROUND, stage, connected=0)
    return inbox


def fetch(inbox: Inbox, signer: bytes, batch: RolloutBatch) -> object:
    envelope, digest = sealed(batch, signer)
    announcement = RolloutAnnouncement(
        SWARM, batch.round, batch.stage, pid(signer), digest, len(batch.groups), len(envelope)
    )
    decision = inbox.heard(pid(signer), seal(announcement, signer))
    assert isinstance(decision, Fetch), decision
    verdict = inbox.fetched(job_for(announcement), envelope, direct=True)
    if isinstance(verdict, NeedInputs):  # nobody serves them here
        verdict = inbox.fetched(job_for(announcement), envelope, direct=True, inputs_fetched=True)
    return verdict


def test_the_inbox_rejects_a_forged_critique_and_bans_its_author() -> None:
    # Fails if verification is off: without re-scoring this batch is accepted (last lines).
    store = store_with_answers(ALICE, BOB, CAROL)
    inbox = acr_inbox(store, CRITIQUE)
    assert fetch(inbox, ALICE, forged_critique(store)) == Reject("forged_reward", pid(ALICE))
    assert inbox.scores.is_banned(pid(ALICE)) and inbox.rejections["forged_reward"] == 1
    trusting = acr_inbox(store, CRITIQUE)
    trusting.game = attrs.evolve(GAME, answer=attrs.evolve(RULES, rescore=False))
    assert isinstance(fetch(trusting, ALICE, forged_critique(store)), Accept)


def test_an_honest_critique_is_accepted_stored_and_trains_as_resolve_input() -> None:
    store = store_with_answers(ALICE, BOB, CAROL)
    inbox = acr_inbox(store, CRITIQUE)
    critique = honest_batch(ALICE, CRITIQUE, GAME.items(ROUND, CRITIQUE, pid(ALICE), store))
    assert isinstance(fetch(inbox, ALICE, critique), Accept)
    assert inbox.store.get(ROUND, CRITIQUE, pid(ALICE)) is not None
    assert GAME.items(ROUND, RESOLVE, pid(ME), inbox.store)


def test_references_to_batches_we_cannot_match_are_rejected_with_reason_and_blame() -> None:
    store = store_with_answers(ALICE, BOB, CAROL)
    items = GAME.items(ROUND, CRITIQUE, pid(ALICE), store)
    honest = honest_batch(ALICE, CRITIQUE, items)
    group = honest.groups[0]
    ref = InputRef.of(group.question)

    def with_ref(new: InputRef) -> RolloutBatch:
        return attrs.evolve(honest, groups=(attrs.evolve(group, question=new.question()),))

    cases = {
        "input_mismatch": (with_ref(attrs.evolve(ref, prefix=ref.prefix ^ 1)), pid(ALICE)),  # wrong content
        "bad_input": (with_ref(attrs.evolve(ref, group=7)), pid(ALICE)),  # no such group in that batch
        "missing_input": (with_ref(attrs.evolve(ref, author=pid(key("nobody")))), None),  # not held
        "self_reference": (with_ref(attrs.evolve(ref, author=pid(ALICE))), pid(ALICE)),
    }
    for reason, (batch, blame) in cases.items():
        assert fetch(acr_inbox(store, CRITIQUE), ALICE, batch) == Reject(reason, blame), reason
    twice = attrs.evolve(honest, groups=(group, group))
    assert fetch(acr_inbox(store, CRITIQUE), ALICE, twice) == Reject("duplicate_question", pid(ALICE))


def test_the_machine_opens_each_stage_of_a_round_in_turn() -> None:
    machine = RoundMachine(plan=REGISTRY[GAME.name].plan)
    opened = []
    for stage in range(3):
        actions = machine.handle(stage * 1000, CoordinatorSaid(ROUND, stage, 3, (stage + 1) * 1000))
        opened += [a for a in actions if isinstance(a, Generate)]
    assert opened == [Generate(ROUND, 0), Generate(ROUND, 1), Generate(ROUND, 2)]
    assert machine.handle(3000, CoordinatorSaid(ROUND, 1, 3, 2000)) == ()  # never goes back


def test_a_single_stage_machine_plays_a_round_once_whatever_the_coordinator_s_stages() -> None:
    machine = RoundMachine()  # StagePlan(): what a single-stage game's peer runs
    opened = []
    for round_number, stage in ((ROUND, 0), (ROUND, 1), (ROUND + 1, 1), (ROUND + 2, 0)):
        at = (round_number * 2 + stage) * 1000
        actions = machine.handle(at, CoordinatorSaid(round_number, stage, 2, at + 1000))
        opened += [(a.round, a.stage) for a in actions if isinstance(a, Generate)]
    assert opened == [(ROUND, 0), (ROUND + 1, 1), (ROUND + 2, 0)]


def test_the_next_stage_s_announcements_are_held_until_it_opens() -> None:
    store = store_with_answers(ALICE, BOB, CAROL)
    inbox = acr_inbox(store, 0)
    critique = honest_batch(ALICE, CRITIQUE, GAME.items(ROUND, CRITIQUE, pid(ALICE), store))
    envelope, digest = sealed(critique, ALICE)
    announcement = RolloutAnnouncement(SWARM, ROUND, CRITIQUE, pid(ALICE), digest, 1, len(envelope))
    assert inbox.heard(pid(ALICE), seal(announcement, ALICE)) == Hold(ROUND, CRITIQUE)


# ---- properties ---------------------------------------------------------------------------

texts = st.one_of(st.integers(0, 9).map(lambda i: f"<answer>{i}</answer>"), st.text(max_size=12))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["0", "1", "2", "x"]), min_size=2, max_size=4), texts)
def test_a_critique_earns_what_its_pick_scores(candidates: list[str], text: str) -> None:
    item = StageItem(CRITIQUE, QuestionRef("a", 1, 0), QuestionRef("echo", 1, 1), tuple(candidates))
    pick = parse_pick(text)
    expected = 1.0 if 1 <= pick <= len(candidates) and candidates[pick - 1] == "1" else 0.0
    assert score_item(item, text, RULES.registry) == expected


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_any_claimed_reward_off_by_more_than_the_tolerance_is_forged(data: st.DataObject) -> None:
    store = store_with_answers(ALICE, BOB, CAROL)
    critic = data.draw(st.sampled_from([ALICE, BOB, CAROL]))
    stage_items = GAME.items(ROUND, CRITIQUE, pid(critic), store)
    batch = honest_batch(critic, CRITIQUE, stage_items)
    g = data.draw(st.integers(0, len(batch.groups) - 1))
    c = data.draw(st.integers(0, 1))
    completion = batch.groups[g].completions[c]
    claim = data.draw(st.floats(0.0, 1.0).filter(lambda r: abs(r - completion.reward) > 1e-6))
    completions = list(batch.groups[g].completions)
    completions[c] = attrs.evolve(completion, reward=claim)
    groups = list(batch.groups)
    groups[g] = attrs.evolve(groups[g], completions=tuple(completions))
    forged = attrs.evolve(batch, groups=tuple(groups))
    resolved = GAME.resolve(forged, store)
    assert resolved == stage_items  # the references are untouched: only the claim lies
    assert GAME.verify(forged, stage_items).reason == "forged_reward"
    assert GAME.verify(batch, stage_items).ok


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from([ALICE, BOB, CAROL, ME]), min_size=1, max_size=4, unique=True), st.data())
def test_items_are_deterministic_bounded_and_never_our_own(authors: list[bytes], data: st.DataObject) -> None:
    store = store_with_answers(*authors)
    me = pid(data.draw(st.sampled_from([ALICE, BOB, CAROL, ME])))
    items = GAME.items(ROUND, CRITIQUE, me, store)
    assert items == GAME.items(ROUND, CRITIQUE, me, store)
    assert len(items) <= RULES.questions_per_round
    others = [a for a in authors if pid(a) != me]
    assert bool(items) == bool(others)
    for item in items:
        ref = InputRef.of(item.ref)
        stored = store.get(ROUND, 0, ref.author)
        assert ref.author != me and stored is not None and ref.prefix == digest_prefix(stored.digest)


@given(st.lists(st.integers(0, 4), max_size=6))
def test_the_majority_is_the_most_picked_valid_candidate(picks: list[int]) -> None:
    question = QuestionRef("echo", 1, 1)
    item = StageItem(RESOLVE, QuestionRef("a", 1, 0), question, ("a", "b", "c"), tuple(picks))
    valid = [p for p in picks if 1 <= p <= 3]
    majority = item.majority()
    assert majority == 0 if not valid else valid.count(majority) == max(valid.count(p) for p in valid)


def test_a_critique_built_on_batches_we_never_fetched_asks_for_them_then_verifies() -> None:
    theirs = store_with_answers(ALICE, BOB, CAROL)  # what the critic accepted
    inbox = acr_inbox(InputStore(), CRITIQUE)  # we accepted none of it
    critique = honest_batch(ALICE, CRITIQUE, GAME.items(ROUND, CRITIQUE, pid(ALICE), theirs))
    envelope, digest = sealed(critique, ALICE)
    announcement = RolloutAnnouncement(SWARM, ROUND, CRITIQUE, pid(ALICE), digest, 2, len(envelope))
    decision = inbox.heard(pid(ALICE), seal(announcement, ALICE))
    assert isinstance(decision, Fetch)
    need = inbox.fetched(decision.job, envelope, direct=True)
    assert isinstance(need, NeedInputs)
    authors = {InputRef.of(g.question).author for g in critique.groups}
    assert {(j.round, j.stage, j.sender) for j in need.jobs} == {(ROUND, 0, a) for a in authors}
    signer = {pid(s): s for s in (ALICE, BOB, CAROL)}
    for job in need.jobs:
        assert inbox.input_fetched(job, sealed(answers(signer[job.sender]), signer[job.sender])[0]) is None
    assert inbox.store.get(ROUND, 0, next(iter(authors))) is not None  # kept as an input...
    again = inbox.fetched(decision.job, envelope, direct=True, inputs_fetched=True)
    assert isinstance(again, Accept)
    assert set(inbox.training_pool(inbox.current)) == {pid(ALICE)}  # type: ignore[arg-type]


def test_an_input_nobody_serves_leaves_the_critique_unverified_and_unblamed() -> None:
    theirs = store_with_answers(ALICE, BOB, CAROL)
    inbox = acr_inbox(InputStore(), CRITIQUE)
    critique = honest_batch(ALICE, CRITIQUE, GAME.items(ROUND, CRITIQUE, pid(ALICE), theirs))
    envelope, digest = sealed(critique, ALICE)
    announcement = RolloutAnnouncement(SWARM, ROUND, CRITIQUE, pid(ALICE), digest, 2, len(envelope))
    decision = inbox.heard(pid(ALICE), seal(announcement, ALICE))
    assert isinstance(decision, Fetch)
    need = inbox.fetched(decision.job, envelope, direct=True)
    assert isinstance(need, NeedInputs)
    for job in need.jobs:
        inbox.input_fetched(job, None)
        # a batch signed by someone else than the author named is no input either
        inbox.input_fetched(job, sealed(answers(ME), ME)[0])
    final = inbox.fetched(decision.job, envelope, direct=True, inputs_fetched=True)
    assert final == Reject("missing_input", None)
    assert inbox.counters["input_invalid"] == len(need.jobs) and not inbox.scores.invalid
