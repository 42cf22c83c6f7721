"""Hypothesis strategies for every wire message, shared by protocol, simulator and node tests.

Import as `from strategies import wire_messages` (pytest puts tests/ on sys.path).
Every strategy yields messages that `protocol.codec.encode` accepts: strings are sized in
UTF-8 bytes within `protocol.limits`, and batches stay far below the 4 MiB cap.
"""

from __future__ import annotations

import string

import attrs
from hypothesis import strategies as st

from protocol import limits
from protocol.envelope import peer_id_from_seed
from protocol.logprobs import pack_logprobs
from protocol.messages import (
    Completion,
    FetchRequest,
    FetchResponse,
    Hello,
    PushedAnnouncement,
    QuestionGroup,
    QuestionRef,
    RewardReport,
    RolloutAnnouncement,
    RolloutBatch,
    SwarmSchedule,
    WinnersVote,
)

_ASCII = string.ascii_letters + string.digits + "-_./:"


def bounded_text(max_bytes: int, min_size: int = 0) -> st.SearchStrategy[str]:
    """Text of at most `max_bytes` UTF-8 bytes: short arbitrary unicode, or ASCII up to the cap."""
    return st.one_of(
        st.text(min_size=min_size, max_size=max_bytes // 4),  # <= 4 bytes per code point
        st.text(alphabet=_ASCII, min_size=max(min_size, 1), max_size=max_bytes),
    )


def uints(hi: int = limits.MAX_UINT63) -> st.SearchStrategy[int]:
    return st.integers(min_value=0, max_value=hi)


ed25519_seeds = st.binary(min_size=32, max_size=32)
peer_ids = st.one_of(ed25519_seeds.map(peer_id_from_seed), bounded_text(limits.MAX_PEER_ID_BYTES, min_size=1))
swarm_ids = bounded_text(limits.MAX_SWARM_ID_BYTES, min_size=1)
task_names = bounded_text(limits.MAX_TASK_NAME_BYTES, min_size=1)
rounds = uints()
stages = uints(limits.MAX_STAGES - 1)
rewards = st.floats(min_value=limits.MIN_REWARD, max_value=limits.MAX_REWARD, allow_nan=False)

question_refs = st.builds(QuestionRef, task=task_names, dataset_seed=uints(), index=uints())
# Sampled log-probs: empty (a sender without them) or a few finite values <= 0 (float32-exact,
# so a round trip is equality).
logprob_bytes = st.one_of(
    st.just(b""),
    st.lists(st.floats(min_value=-(2.0**100), max_value=0.0, width=32), max_size=16).map(pack_logprobs),
)
completions = st.builds(Completion, text=bounded_text(256), reward=rewards, logprobs=logprob_bytes)


def question_groups(max_completions: int = 4) -> st.SearchStrategy[QuestionGroup]:
    return st.builds(
        QuestionGroup,
        question=question_refs,
        completions=st.lists(completions, max_size=max_completions).map(tuple),
    )


task_weights = st.floats(min_value=0.0, max_value=limits.MAX_TASK_WEIGHT, allow_nan=False)


@st.composite
def swarm_rules(draw: st.DrawFn, max_tasks: int = 8) -> dict:
    """The scoring-rule fields of a SwarmSchedule: 1..max_tasks distinct tasks, weights empty
    (uniform) or one per task with a positive sum, and in-range scalars."""
    tasks = tuple(draw(st.lists(task_names, min_size=1, max_size=max_tasks, unique=True)))
    weights: tuple[float, ...] = ()
    if draw(st.booleans()):
        weights = tuple(draw(st.lists(task_weights, min_size=len(tasks), max_size=len(tasks))))
        if not sum(weights) > 0:
            weights = (1.0, *weights[1:])
    return {
        "tasks": tasks,
        "weights": weights,
        "questions_per_round": draw(st.integers(min_value=1, max_value=limits.MAX_GROUPS_PER_BATCH)),
        "format_reward": draw(rewards),
        "difficulty": draw(st.integers(min_value=limits.MIN_DIFFICULTY, max_value=limits.MAX_DIFFICULTY)),
    }


@st.composite
def _swarm_schedules(draw: st.DrawFn) -> SwarmSchedule:
    return SwarmSchedule(
        swarm_id=draw(swarm_ids),
        genesis_ms=draw(uints()),
        round_ms=draw(st.integers(min_value=limits.MIN_ROUND_MS, max_value=limits.MAX_UINT63)),
        stage_count=draw(st.integers(min_value=1, max_value=limits.MAX_STAGES)),
        seed=draw(uints()),
        **draw(swarm_rules()),
        # Any name the wire allows: whether this peer knows the game is decided on adoption.
        game=draw(st.text(min_size=1, max_size=limits.MAX_GAME_NAME_BYTES // 4)),
    )


swarm_schedules = _swarm_schedules()

hellos = st.builds(
    Hello,
    protocol_version=uints(),
    peer_id=peer_ids,
    schedule=swarm_schedules,
    current_round=st.integers(min_value=-1, max_value=limits.MAX_UINT63),
    listen_addrs=st.lists(
        bounded_text(limits.MAX_LISTEN_ADDR_BYTES, min_size=1), max_size=limits.MAX_LISTEN_ADDRS
    ).map(tuple),
    model=bounded_text(limits.MAX_MODEL_NAME_BYTES),
)
announcements = st.builds(
    RolloutAnnouncement,
    swarm_id=swarm_ids,
    round=rounds,
    stage=stages,
    peer_id=peer_ids,
    batch_digest=st.binary(min_size=limits.DIGEST_BYTES, max_size=limits.DIGEST_BYTES),
    group_count=uints(limits.MAX_GROUPS_PER_BATCH),
    size_bytes=uints(limits.MAX_ENVELOPE_BYTES),
)
batches = st.builds(
    RolloutBatch,
    swarm_id=swarm_ids,
    round=rounds,
    stage=stages,
    peer_id=peer_ids,
    groups=st.lists(question_groups(), max_size=5).map(tuple),
)
fetch_requests = st.builds(FetchRequest, swarm_id=swarm_ids, round=rounds, stage=stages, peer_id=peer_ids)
fetch_responses = st.one_of(
    st.just(FetchResponse(found=False, envelope=b"")),
    st.builds(FetchResponse, found=st.just(True), envelope=st.binary(min_size=1, max_size=2048)),
)
reward_reports = st.builds(
    RewardReport, swarm_id=swarm_ids, round=rounds, stage=stages, peer_id=peer_ids, reward=rewards
)
winners_votes = st.builds(
    WinnersVote,
    swarm_id=swarm_ids,
    round=rounds,
    peer_id=peer_ids,
    winners=st.lists(peer_ids, max_size=limits.MAX_WINNERS).map(tuple),
)

pushed_announcements = st.builds(
    PushedAnnouncement,
    announcement=st.binary(min_size=1, max_size=512),
    envelope=st.binary(min_size=1, max_size=2048),
)

STRATEGY_OF_KIND: dict[str, st.SearchStrategy] = {
    "hello": hellos,
    "announce": announcements,
    "batch": batches,
    "fetch_req": fetch_requests,
    "fetch_resp": fetch_responses,
    "pushed": pushed_announcements,
    "reward": reward_reports,
    "winners": winners_votes,
}
wire_messages = st.one_of(*STRATEGY_OF_KIND.values())


def authored_by(message, peer_id: str):
    """`message` with its author field set to `peer_id` (messages without one unchanged)."""
    if isinstance(message, FetchRequest | FetchResponse | PushedAnnouncement):
        return message
    return attrs.evolve(message, peer_id=peer_id)
