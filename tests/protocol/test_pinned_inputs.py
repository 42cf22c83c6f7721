"""protocol/inputs.py: admitting a batch a later-stage batch references. Each outcome is counted
once per input (a peer's dashboard and the round report read `input_missing`, `input_invalid`
and `inputs_fetched`), a kept input is stored with the items it answered, and an input that does
not verify is a rejection blamed on its author with the verdict's reason."""

from __future__ import annotations

import attrs

from protocol.acr import CRITIQUE, RESOLVE
from protocol.admission import Inbox
from protocol.decisions import FetchJob, NeedInputs, Reject
from protocol.inputs import admit_input, need_inputs
from protocol.messages import RolloutBatch
from protocol.staged import InputStore
from protocol.verification import Verdict
from swarmp2p.peer_cache import VerifyCache
from tests.protocol.test_pinned_admission import CAROL, staged_inbox
from tests.protocol.test_protocol_acr import ALICE, BOB, honest_batch, pid, sealed, store_with_answers
from tests.protocol.test_protocol_acr import GAME as ACR
from tests.protocol.test_protocol_acr import ROUND as ACR_ROUND


def critique(critic: bytes) -> tuple[RolloutBatch, tuple[object, ...]]:
    """`critic`'s honest critique of the answers of ALICE, BOB and CAROL, and its items."""
    items = ACR.items(ACR_ROUND, CRITIQUE, pid(critic), store_with_answers(ALICE, BOB, CAROL))
    return honest_batch(critic, CRITIQUE, items), items


def job(author: bytes) -> FetchJob:
    return need_inputs([(ACR_ROUND, CRITIQUE, pid(author))]).jobs[0]


def resolve_inbox(store: InputStore | None = None, **rules: object) -> Inbox:
    """A verifier collecting the resolve stage that holds every answer (or `store`)."""
    return staged_inbox(
        ACR, store_with_answers(ALICE, BOB, CAROL) if store is None else store, RESOLVE, **rules
    )


def test_an_input_job_names_no_digest_and_no_group_count() -> None:
    # A reference pins the content itself: the fetch must not hold it to an announcement.
    assert need_inputs([(4, 1, "a"), (4, 0, "b")]) == NeedInputs(
        (FetchJob(4, 1, "a", b"", -1), FetchJob(4, 0, "b", b"", -1))
    )


def test_kept_inputs_are_stored_with_their_items_and_counted() -> None:
    inbox = resolve_inbox()
    for count, critic in enumerate((BOB, CAROL), start=1):
        batch, items = critique(critic)
        envelope, digest = sealed(batch, critic)
        assert admit_input(inbox, job(critic), envelope) is None
        stored = inbox.store.get(ACR_ROUND, CRITIQUE, pid(critic))
        assert stored is not None and (stored.digest, stored.batch, stored.items) == (digest, batch, items)
        assert inbox.counters["inputs_fetched"] == count


def test_missing_and_invalid_inputs_are_counted_once_each() -> None:
    batch, _ = critique(BOB)
    envelope = sealed(batch, BOB)[0]
    inbox = resolve_inbox()
    for count in (1, 2):
        assert admit_input(inbox, job(BOB), None) is None
        assert inbox.counters["input_missing"] == count
    for count, bad in enumerate([b"not an envelope", envelope], start=1):
        # the second: BOB's critique, fetched for a job that names CAROL as its author
        assert admit_input(inbox, job(CAROL) if bad == envelope else job(BOB), bad) is None
        assert inbox.counters["input_invalid"] == count
    assert inbox.counters["inputs_fetched"] == 0 and inbox.store.get(ACR_ROUND, CRITIQUE, pid(CAROL)) is None


def test_an_input_over_the_batch_size_cap_is_invalid() -> None:
    envelope = sealed(critique(BOB)[0], BOB)[0]
    inbox = resolve_inbox(max_batch_bytes=len(envelope) - 1)
    for count in (1, 2):
        assert admit_input(inbox, job(BOB), envelope) is None
        assert inbox.counters["input_invalid"] == count
    assert inbox.store.get(ACR_ROUND, CRITIQUE, pid(BOB)) is None


def test_an_inputs_own_inputs_are_asked_for_by_default_and_dropped_on_the_last_try() -> None:
    envelope = sealed(critique(BOB)[0], BOB)[0]
    inbox = resolve_inbox(InputStore())  # none of the answers BOB critiqued
    need = admit_input(inbox, job(BOB), envelope)
    assert isinstance(need, NeedInputs) and {(j.round, j.stage) for j in need.jobs} == {(ACR_ROUND, 0)}
    for count in (1, 2):
        assert admit_input(inbox, job(BOB), envelope, last=True) is None
        assert inbox.counters["input_invalid"] == count


def test_an_input_that_does_not_verify_is_blamed_on_its_author_with_its_reason() -> None:
    inbox = resolve_inbox()
    inbox.opener = VerifyCache()  # verdicts remembered by digest: each input gets its own
    honest = critique(BOB)[0]
    assert admit_input(inbox, job(BOB), sealed(honest, BOB)[0]) is None
    forged_batch, _ = critique(CAROL)
    first = forged_batch.groups[0]
    lie = attrs.evolve(first.completions[1], reward=1.0 - first.completions[1].reward)
    forged = attrs.evolve(
        forged_batch, groups=(attrs.evolve(first, completions=(first.completions[0], lie)),)
    )
    assert admit_input(inbox, job(CAROL), sealed(forged, CAROL)[0]) == Reject("forged_reward", pid(CAROL))
    assert inbox.store.get(ACR_ROUND, CRITIQUE, pid(CAROL)) is None


@attrs.frozen
class _Reasonless(type(ACR)):  # type: ignore[misc]
    """The game refusing every batch without saying why."""

    def verify(self, batch: RolloutBatch, items: object = ()) -> Verdict:  # type: ignore[override]
        return Verdict(ok=False, reason=None, groups_checked=0)


def test_an_input_refused_without_a_reason_is_an_invalid_batch() -> None:
    game = _Reasonless(answer=ACR.answer)
    inbox = staged_inbox(game, store_with_answers(ALICE, BOB, CAROL), RESOLVE)
    envelope = sealed(critique(BOB)[0], BOB)[0]
    assert admit_input(inbox, job(BOB), envelope) == Reject("invalid_batch", pid(BOB))
