"""A tiny admission world for tests: one echo task, named keys, an inbox opened on a round, and
real signed batches and announcements (the admission rules' tests and every test that needs an
inbox to talk to build on these)."""

from __future__ import annotations

import hashlib

from protocol.admission import AdmissionRules, Fetch, Inbox
from protocol.envelope import peer_id_from_seed, seal
from protocol.game import SingleStageGame
from protocol.messages import Completion, QuestionGroup, QuestionRef, RolloutAnnouncement, RolloutBatch
from protocol.rounds import RoundMachine, RoundOpened
from protocol.scoring import PeerScores

SWARM = "adm"
SEED = 11
ROUND = 5


class EchoRegistry:
    """One task: the right answer to question i is the text str(i)."""

    def task_names(self) -> tuple[str, ...]:
        return ("echo",)

    def is_heldout(self, question: QuestionRef) -> bool:
        return False

    def score(self, question: QuestionRef, completion_text: str) -> float:
        return 1.0 if completion_text == str(question.index) else 0.0


def key(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


ME, ALICE, BOB = key("me"), key("alice"), key("bob")
GAME = SingleStageGame(seed=SEED, tasks=("echo",), questions_per_round=2, registry=EchoRegistry())


def pid(seed: bytes) -> str:
    return peer_id_from_seed(seed)


def make_inbox(**rules: object) -> Inbox:
    machine = RoundMachine()
    machine.handle(0, RoundOpened(ROUND, collect_until_ms=1000, round_ends_ms=2000))
    inbox = Inbox(
        AdmissionRules(swarm_id=SWARM, me=pid(ME), seed=SEED, **rules),  # type: ignore[arg-type]
        machine,
        GAME,
        scores=PeerScores(ban_threshold=3),
    )
    inbox.open_round(ROUND, 0, connected=0)
    return inbox


def groups_for(
    peer: str, round_number: int = ROUND, *, forge: bool = False, stage: int = 0
) -> tuple[QuestionGroup, ...]:
    return tuple(
        QuestionGroup(q, (Completion(str(q.index), 0.0 if forge else 1.0), Completion("no", 0.0)))
        for q in GAME.questions(round_number, stage, peer)
    )


def batch_envelope(
    signer: bytes,
    round_number: int = ROUND,
    groups: tuple[QuestionGroup, ...] | None = None,
    *,
    stage: int = 0,
    swarm: str = SWARM,
) -> bytes:
    peer = pid(signer)
    groups = groups if groups is not None else groups_for(peer, round_number, stage=stage)
    return seal(RolloutBatch(swarm, round_number, stage, peer, groups), signer)


def announce(signer: bytes, envelope: bytes, *, round_number: int = ROUND, group_count: int = 2) -> bytes:
    announcement = RolloutAnnouncement(
        SWARM, round_number, 0, pid(signer), hashlib.sha256(envelope).digest(), group_count, len(envelope)
    )
    return seal(announcement, signer)


def fetch_announced(inbox: Inbox, signer: bytes, envelope: bytes, served: bytes | None = None, **kw: object):
    """Hear `signer` announce `envelope`, then have the fetch return `served` (default: it)."""
    decision = inbox.heard(pid(signer), announce(signer, envelope, **kw))  # type: ignore[arg-type]
    assert isinstance(decision, Fetch), decision
    inbox.queued(decision.job)
    return inbox.fetched(decision.job, envelope if served is None else served, direct=True)
