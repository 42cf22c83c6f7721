"""The admission inbox's rules (protocol/admission.py), one test per rule, each written to fail
when its rule is removed.

Pure: a RoundMachine, an Inbox, a tiny task registry and real signed envelopes; no trio, no
network, no clock.
"""

from __future__ import annotations

import hashlib

import msgpack
import pytest

from protocol import codec
from protocol.admission import Accept, Defer, Fetch, FetchJob, Hold, Reject, job_for
from protocol.envelope import seal
from protocol.errors import ProtocolError
from protocol.game import SingleStageGame
from protocol.messages import RolloutAnnouncement, RolloutBatch
from protocol.rounds import Phase
from protocol.sampling import sample_training_groups
from protocol.seeds import derive_seed
from tests.helpers.inbox import (
    ALICE,
    BOB,
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


def test_an_honest_batch_is_fetched_accepted_and_trained_on() -> None:
    inbox = make_inbox()
    decision = fetch_announced(inbox, ALICE, batch_envelope(ALICE))
    assert isinstance(decision, Accept) and decision.sender == pid(ALICE)
    assert set(inbox.training_pool(inbox.current)) == {pid(ALICE)}  # type: ignore[arg-type]
    assert inbox.scores.valid[pid(ALICE)] == 1


def test_a_batch_signed_by_someone_else_than_the_announcer_is_rejected() -> None:
    inbox = make_inbox()
    bobs = batch_envelope(BOB)  # valid, Bob's, but announced (its digest) by Alice as hers
    assert fetch_announced(inbox, ALICE, bobs) == Reject("sender_mismatch", pid(ALICE))
    assert inbox.current is not None and inbox.current.external == {}


def test_an_old_rounds_batch_replayed_as_this_rounds_is_rejected() -> None:
    inbox = make_inbox()
    old = batch_envelope(ALICE, round_number=ROUND - 1)  # honest for round 4
    assert fetch_announced(inbox, ALICE, old) == Reject("batch_mismatch", pid(ALICE))
    assert inbox.current is not None and inbox.current.external == {}


def test_a_batch_for_another_stage_or_swarm_than_announced_is_rejected() -> None:
    inbox = make_inbox()
    other_stage = batch_envelope(ALICE, stage=1)  # honest for stage 1, announced for stage 0
    assert fetch_announced(inbox, ALICE, other_stage) == Reject("batch_mismatch", pid(ALICE))
    other_swarm = batch_envelope(BOB, swarm="elsewhere")  # honest in another swarm
    assert fetch_announced(inbox, BOB, other_swarm) == Reject("batch_mismatch", pid(BOB))
    assert inbox.current is not None and inbox.current.external == {}


def test_a_batch_with_another_group_count_than_announced_is_rejected() -> None:
    inbox = make_inbox()
    assert fetch_announced(inbox, ALICE, batch_envelope(ALICE), group_count=1) == Reject(
        "batch_mismatch", pid(ALICE)
    )


def test_a_forged_reward_is_refused_and_bans_at_once() -> None:
    inbox = make_inbox()
    forged = batch_envelope(ALICE, groups=groups_for(pid(ALICE), forge=True))
    assert fetch_announced(inbox, ALICE, forged) == Reject("forged_reward", pid(ALICE))
    assert inbox.current is not None and inbox.current.external == {}
    assert inbox.scores.is_banned(pid(ALICE))  # one proof is enough (threshold 3)


def test_without_ban_on_proof_a_forgery_is_one_strike() -> None:
    inbox = make_inbox(ban_on_proof=False)
    forged = batch_envelope(ALICE, groups=groups_for(pid(ALICE), forge=True))
    fetch_announced(inbox, ALICE, forged)
    assert not inbox.scores.is_banned(pid(ALICE)) and inbox.scores.invalid[pid(ALICE)] == 1


def test_equivocation_bans_at_once() -> None:
    inbox = make_inbox()
    first, second = batch_envelope(ALICE), batch_envelope(ALICE, groups=groups_for(pid(ALICE))[:1])
    assert isinstance(inbox.heard(pid(ALICE), announce(ALICE, first)), Fetch)
    assert inbox.heard(pid(ALICE), announce(ALICE, second, group_count=1)) == Reject(
        "equivocation", pid(ALICE)
    )
    assert inbox.scores.is_banned(pid(ALICE))


def test_a_batch_answering_another_peers_questions_is_rejected() -> None:
    inbox = make_inbox()
    bobs_questions = groups_for(pid(BOB))  # correctly answered, but assigned to Bob
    assert set(bobs_questions) != set(groups_for(pid(ALICE)))
    envelope = batch_envelope(ALICE, groups=bobs_questions)
    assert fetch_announced(inbox, ALICE, envelope) == Reject("unassigned_question", pid(ALICE))


def test_a_peer_banned_after_its_batch_was_accepted_is_not_trained_on() -> None:
    inbox = make_inbox()
    assert isinstance(fetch_announced(inbox, ALICE, batch_envelope(ALICE)), Accept)
    assert isinstance(fetch_announced(inbox, BOB, batch_envelope(BOB)), Accept)
    inbox.scores.ban(pid(ALICE), "equivocation")  # e.g. caught lying later in the round
    assert set(inbox.training_pool(inbox.current)) == {pid(BOB)}  # type: ignore[arg-type]


def test_the_verdict_decides() -> None:
    class Refuses(SingleStageGame):
        def verify(self, batch: RolloutBatch):  # type: ignore[no-untyped-def]
            from protocol.verification import Verdict

            return Verdict(ok=False, reason="too_few_groups", groups_checked=0)

    inbox = make_inbox()
    inbox.game = Refuses(seed=SEED, tasks=("echo",), questions_per_round=2, registry=EchoRegistry())
    assert fetch_announced(inbox, ALICE, batch_envelope(ALICE)) == Reject("too_few_groups", pid(ALICE))


def test_announcements_are_judged_against_the_round() -> None:
    inbox = make_inbox()
    envelope = batch_envelope(ALICE, round_number=ROUND + 1)
    assert inbox.heard(pid(ALICE), announce(ALICE, envelope, round_number=ROUND + 1)) == Hold(ROUND + 1)
    stale = batch_envelope(BOB, round_number=ROUND - 1)
    assert inbox.heard(pid(BOB), announce(BOB, stale, round_number=ROUND - 1)) == Reject("stale_round", None)
    far = batch_envelope(BOB, round_number=ROUND + 2)
    assert inbox.heard(pid(BOB), announce(BOB, far, round_number=ROUND + 2)) == Reject("future_round", None)
    assert inbox.heard(pid(ME), b"anything") is None  # our own echo
    relayed = announce(ALICE, batch_envelope(ALICE))
    assert inbox.heard(pid(BOB), relayed) == Reject("sender_mismatch", pid(BOB))


def test_a_sweep_job_is_accepted_from_the_dht_and_a_late_fetch_is_not() -> None:
    inbox = make_inbox()
    inbox.known[pid(ALICE)] = ROUND - 1
    (job,) = list(inbox.sweep([pid(ME)]))
    assert job == FetchJob(ROUND, 0, pid(ALICE), b"", -1, dht_only=True)
    inbox.queued(job)
    assert isinstance(inbox.fetched(job, batch_envelope(ALICE), direct=False), Accept)
    assert inbox.counters["sweep_recovered"] == 1
    late = make_inbox()
    job = job_for(RolloutAnnouncement(SWARM, ROUND, 0, pid(BOB), b"\0" * 32, 2, 10))
    late.machine.phase = Phase.TRAINING
    assert not late.may_fetch(job)
    assert late.rejections["late"] == 1


def test_fetch_sampling_defers_by_a_per_peer_hash_and_tops_up() -> None:
    inbox = make_inbox(fetch_sample=1)
    inbox.open_round(ROUND, 0, connected=1000)  # fetch probability 0.001: almost all deferred
    decisions = [inbox.heard(pid(k), announce(k, batch_envelope(k))) for k in (ALICE, BOB)]
    deferred = [d for d in decisions if isinstance(d, Defer)]
    assert deferred, decisions
    top_up = inbox.top_up(ROUND)
    assert isinstance(top_up, Fetch)
    assert top_up.job.sender == min(deferred, key=lambda d: (d.priority, d.sender)).sender


# ---- the codec's rules that admission relies on ----------------------------------------------


def _tamper(message: object, **body: object) -> bytes:
    top = msgpack.unpackb(codec.encode(message))  # type: ignore[arg-type]
    top["b"].update(body)
    return msgpack.packb(top, use_bin_type=True)


@pytest.mark.parametrize("field", ["group_count", "size_bytes", "round"])
def test_true_is_not_a_count(field: str) -> None:
    message = RolloutAnnouncement(SWARM, 1, 0, pid(ALICE), b"\1" * 32, 1, 100)
    assert codec.decode(_tamper(message, **{field: 1})) is not None  # 1 itself is fine
    with pytest.raises(ProtocolError) as error:
        codec.decode(_tamper(message, **{field: True}))
    assert error.value.reason == "bad_type"


def test_a_hello_round_below_minus_one_is_refused() -> None:
    from tests.protocol.vectors.golden_fixtures import MESSAGES

    hello = MESSAGES["hello"]
    assert codec.decode(_tamper(hello, current_round=-1)).current_round == -1  # type: ignore[union-attr]
    with pytest.raises(ProtocolError) as error:
        codec.decode(_tamper(hello, current_round=-2))
    assert error.value.reason == "out_of_range"


# ---- the choice of external groups --------------------------------------------------------------


def test_the_choice_of_external_groups_follows_the_seed_not_the_peer_names() -> None:
    peers = [f"peer-{i:02d}" for i in range(12)]
    external = {p: groups_for(p) for p in peers}
    chosen: list[frozenset[str]] = []
    for s in range(12):
        sampled = sample_training_groups(
            [], external, n_local=0, n_external=4, max_per_peer=1, seed=derive_seed(s, "sample")
        )
        chosen.append(frozenset(p for p, _ in sampled.external))
    assert all(len(c) == 4 for c in chosen)
    assert len(set(chosen)) > 6  # different seeds, different peers
    assert any(peers[-1] in c for c in chosen)  # the alphabetically last peer gets its turn
    assert not all(peers[0] in c for c in chosen)


# ---- every other rule of a fetched batch --------------------------------------------------------


def test_bytes_that_are_not_the_announced_batch_are_refused_and_blamed_only_from_the_announcer() -> None:
    inbox = make_inbox()
    announced, other = batch_envelope(ALICE), batch_envelope(ALICE, groups=groups_for(pid(ALICE))[:1])
    assert fetch_announced(inbox, ALICE, announced, served=other) == Reject("digest_mismatch", pid(ALICE))
    inbox = make_inbox()
    decision = inbox.heard(pid(ALICE), announce(ALICE, announced))
    assert isinstance(decision, Fetch)
    # From the DHT the record may be someone else's doing: not blamed.
    assert inbox.fetched(decision.job, other, direct=False) == Reject("digest_mismatch", None)


def test_a_fetched_message_of_another_kind_is_refused() -> None:
    inbox = make_inbox()
    not_a_batch = announce(ALICE, batch_envelope(ALICE))  # a signed announcement, not a batch
    assert fetch_announced(inbox, ALICE, not_a_batch) == Reject("wrong_kind", pid(ALICE))


def test_a_batch_verified_after_the_collect_deadline_is_late() -> None:
    inbox = make_inbox()
    envelope = batch_envelope(ALICE)
    decision = inbox.heard(pid(ALICE), announce(ALICE, envelope))
    assert isinstance(decision, Fetch)
    inbox.machine.phase = Phase.TRAINING  # the deadline passed while the fetch ran
    assert inbox.fetched(decision.job, envelope, direct=True) == Reject("late", None)
    assert inbox.current is not None and inbox.current.external == {}


def test_a_peer_banned_while_its_batch_was_fetched_is_not_accepted() -> None:
    inbox = make_inbox()
    envelope = batch_envelope(ALICE)
    decision = inbox.heard(pid(ALICE), announce(ALICE, envelope))
    assert isinstance(decision, Fetch)
    inbox.scores.ban(pid(ALICE), "equivocation")
    assert inbox.fetched(decision.job, envelope, direct=True) == Reject("banned", None)
    assert inbox.current is not None and inbox.current.external == {}


def test_a_swept_batch_that_conflicts_with_a_later_announcement_is_not_accepted() -> None:
    inbox = make_inbox()
    inbox.known[pid(ALICE)] = ROUND - 1
    (job,) = list(inbox.sweep([]))
    announced = batch_envelope(ALICE, groups=groups_for(pid(ALICE))[:1])
    assert isinstance(inbox.heard(pid(ALICE), announce(ALICE, announced, group_count=1)), Fetch)
    assert inbox.fetched(job, batch_envelope(ALICE), direct=False) == Reject("sweep_conflict", None)
    assert not inbox.scores.invalid  # not blamed: the record may predate a restart


def test_nothing_found_is_a_failed_fetch_or_a_missing_sweep_record_never_a_strike() -> None:
    inbox = make_inbox()
    decision = inbox.heard(pid(ALICE), announce(ALICE, batch_envelope(ALICE)))
    assert isinstance(decision, Fetch)
    assert inbox.fetched(decision.job, None, direct=False) == Reject("fetch_failed", None)
    sweep_job = FetchJob(ROUND, 0, pid(BOB), b"", -1, dht_only=True)
    assert inbox.fetched(sweep_job, None, direct=False) is None
    assert inbox.counters["sweep_missing"] == 1 and not inbox.scores.invalid


def test_we_never_strike_ourselves() -> None:
    inbox = make_inbox()
    inbox.reject("forged_reward", blame=pid(ME))
    assert not inbox.scores.invalid and not inbox.scores.banned
    assert inbox.rejections["forged_reward"] == 1


# ---- every other rule of an announcement --------------------------------------------------------


def test_a_banned_peer_is_dropped_before_its_announcement_is_opened() -> None:
    inbox = make_inbox()
    inbox.scores.ban(pid(ALICE), "equivocation")
    assert inbox.heard(pid(ALICE), b"\xc1 not even msgpack") == Reject("banned", None)


def test_an_oversized_announcement_is_blamed_before_it_is_opened() -> None:
    inbox = make_inbox(max_announce_bytes=100)
    data = announce(ALICE, batch_envelope(ALICE))
    assert len(data) > 100
    assert inbox.heard(pid(ALICE), data) == Reject("oversized", pid(ALICE))


def test_a_message_of_another_kind_or_swarm_on_the_topic_is_refused() -> None:
    inbox = make_inbox()
    assert inbox.heard(pid(ALICE), batch_envelope(ALICE)) == Reject("wrong_kind", pid(ALICE))
    elsewhere = seal(RolloutAnnouncement("elsewhere", ROUND, 0, pid(BOB), b"\1" * 32, 2, 100), BOB)
    assert inbox.heard(pid(BOB), elsewhere) == Reject("wrong_swarm", pid(BOB))


def test_an_announcement_for_the_previous_round_is_stale() -> None:
    inbox = make_inbox()
    old = batch_envelope(ALICE, round_number=ROUND - 1)
    assert inbox.heard(pid(ALICE), announce(ALICE, old, round_number=ROUND - 1)) == Reject(
        "stale_round", None
    )


def test_early_announcements_are_kept_once_per_peer_and_bounded() -> None:
    inbox = make_inbox(max_fetch_per_round=1)
    first = announce(ALICE, batch_envelope(ALICE, ROUND + 1), round_number=ROUND + 1)
    assert inbox.heard(pid(ALICE), first) == Hold(ROUND + 1)
    assert inbox.heard(pid(ALICE), first) == Reject("future_round", None)  # once per peer
    second = announce(BOB, batch_envelope(BOB, ROUND + 1), round_number=ROUND + 1)
    assert inbox.heard(pid(BOB), second) == Reject("future_round", None)  # bounded
    assert set(inbox.early[ROUND + 1]) == {pid(ALICE)}


def test_an_announcement_after_the_collect_deadline_is_late() -> None:
    inbox = make_inbox()
    inbox.machine.phase = Phase.TRAINING
    assert inbox.heard(pid(ALICE), announce(ALICE, batch_envelope(ALICE))) == Reject("late", None)


def test_an_announcement_for_another_stage_is_refused() -> None:
    inbox = make_inbox()
    envelope = batch_envelope(ALICE, stage=1)
    announcement = RolloutAnnouncement(
        SWARM, ROUND, 1, pid(ALICE), hashlib.sha256(envelope).digest(), 2, len(envelope)
    )
    assert inbox.heard(pid(ALICE), seal(announcement, ALICE)) == Reject("wrong_stage", None)


def test_repeats_are_duplicates_until_the_flood_threshold_strikes_once() -> None:
    inbox = make_inbox(max_duplicates_per_round=2)
    data = announce(ALICE, batch_envelope(ALICE))
    assert isinstance(inbox.heard(pid(ALICE), data), Fetch)
    assert [inbox.heard(pid(ALICE), data) for _ in range(4)] == [
        Reject("duplicate", None),
        Reject("duplicate", None),
        Reject("flood", pid(ALICE)),
        Reject("duplicate", None),
    ]
    assert inbox.scores.invalid[pid(ALICE)] == 1


def test_an_announced_batch_over_the_size_cap_is_not_fetched() -> None:
    inbox = make_inbox(max_batch_bytes=100)
    assert inbox.heard(pid(ALICE), announce(ALICE, batch_envelope(ALICE))) == Reject("oversized", pid(ALICE))


def test_the_fetch_limit_holds_per_round() -> None:
    inbox = make_inbox(max_fetch_per_round=1)
    first = inbox.heard(pid(ALICE), announce(ALICE, batch_envelope(ALICE)))
    assert isinstance(first, Fetch)
    inbox.queued(first.job)
    assert inbox.heard(pid(BOB), announce(BOB, batch_envelope(BOB))) == Reject("fetch_limit", None)


def test_fetch_sampling_fetches_about_the_sample() -> None:
    peers = [key(f"p{i}") for i in range(40)]
    inbox = make_inbox(fetch_sample=8, max_fetch_per_round=1000)
    inbox.open_round(ROUND, 0, connected=len(peers))
    decisions = [inbox.heard(pid(k), announce(k, batch_envelope(k))) for k in peers]
    fetched = sum(isinstance(d, Fetch) for d in decisions)
    assert 2 <= fetched <= 20, fetched  # about 8 of 40, chosen by hash
    assert fetched + sum(isinstance(d, Defer) for d in decisions) == len(peers)
    plain = make_inbox(max_fetch_per_round=1000)  # fetch_sample 0: every one
    assert all(isinstance(plain.heard(pid(k), announce(k, batch_envelope(k))), Fetch) for k in peers)


def test_a_top_up_skips_peers_banned_since_they_were_deferred() -> None:
    inbox = make_inbox(fetch_sample=1)
    inbox.open_round(ROUND, 0, connected=10_000)
    for k in (ALICE, BOB):
        assert isinstance(inbox.heard(pid(k), announce(k, batch_envelope(k))), Defer)
    first = min(inbox.current.deferred.items(), key=lambda item: (item[1][0], item[0]))[0]  # type: ignore[union-attr]
    inbox.scores.ban(first, "equivocation")
    top_up = inbox.top_up(ROUND)
    assert isinstance(top_up, Fetch) and top_up.job.sender != first
    assert inbox.top_up(ROUND) is None


def test_the_sweep_skips_us_peers_that_announced_and_banned_peers() -> None:
    inbox = make_inbox()
    carol = key("carol")
    for k in (ALICE, BOB, carol):
        inbox.known[pid(k)] = ROUND - 1
    assert isinstance(inbox.heard(pid(ALICE), announce(ALICE, batch_envelope(ALICE))), Fetch)
    inbox.scores.ban(pid(BOB), "equivocation")
    assert [job.sender for job in inbox.sweep([pid(ME)])] == [pid(carol)]
    inbox.known = {pid(ALICE): ROUND - 20}  # too long ago: forgotten
    inbox.open_round(ROUND, 0, connected=0)
    assert list(inbox.sweep([])) == []


def test_oversized_announcements_are_never_opened() -> None:
    """Opening costs a signature check and a strict decode: data over the cap must not reach it."""
    from protocol.admission import PlainOpener

    class Counting(PlainOpener):
        opened = 0

        def open(self, data: bytes, *, max_size: int | None = None):  # type: ignore[no-untyped-def]
            Counting.opened += 1
            return super().open(data, max_size=max_size)

    inbox = make_inbox(max_announce_bytes=100)
    inbox.opener = Counting()
    assert inbox.heard(pid(ALICE), b"\0" * 101) == Reject("oversized", pid(ALICE))
    assert Counting.opened == 0
