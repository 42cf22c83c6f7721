"""The round record's batch ledger: which accepted batches (by digest) went into the round's
training update and why each other one did not, so that "no accepted batch is trained twice or
lost" can be checked from rounds.jsonl alone (the netns nemesis test does, across restarts)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import trio

from netlab.netns_harness import batch_ledger
from protocol.admission import RoundInbox
from protocol.messages import Completion, QuestionGroup, QuestionRef
from protocol.sampling import SamplingState
from swarmp2p import round_steps as steps
from swarmp2p.peer_settings import PeerSettings
from swarmp2p.round_record import UNTRAINED, RoundWork, record_of

SETTINGS = PeerSettings(
    swarm_id="s", seed=1, tasks=("basic_arithmetic",), n_external=2, max_groups_per_peer=1
)


def group(index: int, rewards: Sequence[float]) -> QuestionGroup:
    ref = QuestionRef("basic_arithmetic", 1, index)
    return QuestionGroup(ref, tuple(Completion(f"c{i}", r) for i, r in enumerate(rewards)))


def digest(sender: str) -> bytes:
    return sender.encode().ljust(32, b"\0")


def work_with(accepted: dict[str, tuple[QuestionGroup, ...]]) -> RoundWork:
    inbox = RoundInbox(round=4, stage=0)
    for sender, groups in accepted.items():
        inbox.announced[sender] = digest(sender)
        inbox.external[sender] = groups
    return RoundWork(round=4, stage=0, opened_ms=0, inbox=inbox, local=[group(0, [0.0, 1.0])])


class Policy:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.trained: list[list[QuestionGroup]] = []

    def train(self, groups: list[QuestionGroup]) -> dict[str, float]:
        if self.fail:
            raise RuntimeError("boom")
        self.trained.append(groups)
        return {"loss": 0.0}

    def save(self) -> None:
        pass


async def inline(fn: Any, *args: Any) -> Any:
    return fn(*args)


def train(work: RoundWork, pool: dict[str, tuple[QuestionGroup, ...]], policy: Policy) -> Counter[str]:
    counters: Counter[str] = Counter()

    async def run() -> None:
        await steps.train(
            work,
            pool,
            SamplingState(),
            settings=SETTINGS,
            peer_id="me",
            policy=policy,  # type: ignore[arg-type]
            offload=inline,
            counters=counters,
        )

    trio.run(run)
    return counters


def test_every_accepted_batch_is_trained_once_or_has_a_reason() -> None:
    # a, b and c teach something, d does not; e was banned after it was accepted; the cap of 2
    # external groups (1 per peer) leaves one of a, b, c out.
    teaching = (group(1, [0.0, 1.0]),)
    accepted = {"a": teaching, "b": teaching, "c": teaching, "d": (group(2, [1.0, 1.0]),), "e": teaching}
    work = work_with(accepted)
    policy = Policy()
    train(work, {k: v for k, v in accepted.items() if k != "e"}, policy)
    record = json.loads(json.dumps(record_of(work, completed=True, finished_ms=1).to_json()))

    assert record["accepted_batches"] == {s: digest(s).hex() for s in "abcde"}
    trained = record["trained_batches"]
    assert trained == sorted(digest(s).hex() for s in work.trained_on) and len(trained) == 2
    assert len(policy.trained[0]) == 1 + 2  # the local group and the two external ones
    left_out = {digest(s).hex() for s in "abc"} - set(trained)
    assert record["untrained_batches"] == {
        **{d: "sampled_out" for d in left_out},
        digest("d").hex(): "zero_advantage",
        digest("e").hex(): "banned",
    }
    # Each accepted digest exactly once: in the update or with a reason, never both.
    assert sorted([*trained, *record["untrained_batches"]]) == sorted(record["accepted_batches"].values())
    assert set(record["untrained_batches"].values()) <= set(UNTRAINED)


def test_a_round_with_nothing_to_learn_says_how_many_groups_had_equal_rewards() -> None:
    # Every group, ours and the accepted one, scored alike: GRPO has no advantage to follow, so
    # the step trains nothing, and the record tells that apart from a stage that is not trained.
    accepted = {"a": (group(1, [1.0, 1.0]),), "b": (group(2, [0.0, 0.0]), group(3, [0.5, 0.5]))}
    work = work_with(accepted)
    work.local = [group(0, [0.0, 0.0]), group(4, [1.0, 1.0])]
    policy = Policy()
    train(work, accepted, policy)
    record = record_of(work, completed=True, finished_ms=1).to_json()
    assert policy.trained == []
    assert record["trained_local"] + record["trained_external"] == 0
    assert record["zero_advantage_groups"] == 5
    assert set(record["untrained_batches"].values()) == {"zero_advantage"}
    # A round that learns counts the groups it dropped the same way; one never trained counts 0.
    teaching = work_with({"a": (group(1, [0.0, 1.0]),), "b": (group(2, [1.0, 1.0]),)})
    train(teaching, dict(teaching.inbox.external), Policy())
    assert record_of(teaching, completed=True, finished_ms=1).to_json()["zero_advantage_groups"] == 1
    untrained = work_with(accepted)
    assert record_of(untrained, completed=True, finished_ms=1).to_json()["zero_advantage_groups"] == 0


def test_a_failed_training_step_trains_nothing_and_says_so() -> None:
    accepted = {"a": (group(1, [0.0, 1.0]),)}
    work = work_with(accepted)
    counters = train(work, accepted, Policy(fail=True))
    record = record_of(work, completed=True, finished_ms=1).to_json()
    assert counters["train_failed"] == 1
    assert record["trained_batches"] == []
    assert record["untrained_batches"] == {digest("a").hex(): "train_failed"}


def test_an_abandoned_round_accounts_for_its_batches_and_our_own() -> None:
    work = work_with({"a": (group(1, [0.0, 1.0]),)})
    work.batch_digest = b"\x01" * 32
    record = record_of(work, completed=False, finished_ms=1).to_json()
    assert record["batch_digest"] == "01" * 32
    assert record["trained_batches"] == []
    assert record["untrained_batches"] == {digest("a").hex(): "round_abandoned"}


# ---- the ledger check over rounds.jsonl (netlab/netns_harness.py `batch_ledger`) ----


class Node:
    """What `batch_ledger` reads of a NetnsNode: its index and its rounds.jsonl records."""

    def __init__(self, index: int, records: list[dict[str, Any]]) -> None:
        self.index = index
        self._records = records

    def rounds(self) -> list[dict[str, Any]]:
        return self._records


def line(
    peer: str, r: int, own: str, accepted: dict[str, str], trained: list[str], **untrained: str
) -> dict[str, Any]:
    return {
        "peer_id": peer,
        "round": r,
        "batch_digest": own,
        "accepted_batches": accepted,
        "trained_batches": trained,
        "untrained_batches": untrained,
    }


def two_nodes(*extra_b: dict[str, Any]) -> list[Node]:
    """a and b exchange batches in rounds 1 and 2; b's file gets `extra_b` appended."""
    a = [line("a", 1, "a1", {"b": "b1"}, ["b1"]), line("a", 2, "a2", {"b": "b2"}, [], b2="zero_advantage")]
    b = [line("b", 1, "b1", {"a": "a1"}, ["a1"]), line("b", 2, "b2", {"a": "a2"}, ["a2"]), *extra_b]
    return [Node(0, a), Node(1, b)]


def test_a_balanced_ledger_has_no_violations() -> None:
    ledger = batch_ledger(two_nodes())  # type: ignore[arg-type]
    assert ledger == {"tally": {"accepted": 4, "trained": 3, "zero_advantage": 1}, "violations": []}


def test_the_ledger_finds_a_batch_trained_twice_lost_or_not_the_published_one() -> None:
    # b, restarted, plays round 2 again: trains a2 a second time.
    twice = batch_ledger(two_nodes(line("b", 2, "b2", {"a": "a2"}, ["a2"])))  # type: ignore[arg-type]
    assert twice["violations"] == ["node 1: a2 trained in rounds [2, 2]"]
    # b accepts a3 in round 3 and neither trains it nor says why.
    lost = batch_ledger(two_nodes(line("b", 3, "b3", {"a": "a3"}, [])))  # type: ignore[arg-type]
    assert lost["violations"] == ["node 1 round 3: a3 lost (neither trained nor untrained)"]
    # b accepted for round 1 a digest that is not the batch a recorded publishing.
    forged = batch_ledger(two_nodes(line("b", 1, "b1", {"a": "x1"}, ["x1"])))  # type: ignore[arg-type]
    assert forged["violations"] == ["node 1 round 1: a's batch x1 is not its published a1"]
