"""The fixed messages behind the golden wire vectors (one per kind, plus a sealed envelope).

Changing anything here, or in how the codec encodes it, changes the committed bytes:
that must be a deliberate wire-format change (bump PROTOCOL_VERSION) followed by
`python tests/protocol/vectors/regenerate.py`.
"""

from __future__ import annotations

import hashlib

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

SIGNING_SEED = hashlib.sha256(b"swarmp2p golden vector key").digest()
PEER = peer_id_from_seed(SIGNING_SEED)
OTHER_PEER = peer_id_from_seed(hashlib.sha256(b"swarmp2p golden vector other key").digest())
SWARM = "golden-swarm"

SCHEDULE = SwarmSchedule(
    swarm_id=SWARM,
    genesis_ms=1_700_000_000_000,
    round_ms=60_000,
    stage_count=2,
    seed=42,
    tasks=("basic_arithmetic", "leg_counting", "base_conversion"),
    weights=(2.0, 1.0, 0.5),
    questions_per_round=4,
    format_reward=0.2,
    difficulty=-1,
    game="answer-verify",  # protocol 4: the schedule names the swarm's game
)
BATCH = RolloutBatch(
    swarm_id=SWARM,
    round=12,
    stage=0,
    peer_id=PEER,
    groups=(
        QuestionGroup(
            QuestionRef(task="basic_arithmetic", dataset_seed=123_456_789, index=4321),
            (
                # Sampled log-probs (protocol 3): float32 little-endian, one per sampled token,
                # values a float32 holds exactly so the bytes below are easy to read.
                Completion("<answer>42</answer>", 1.0, pack_logprobs([-0.5, -0.0, -1.25, -7.0625])),
                Completion("<answer>41</answer>", 0.0),
            ),
        ),
        QuestionGroup(
            QuestionRef(task="leg_counting", dataset_seed=2**63 - 1, index=0),
            (Completion("thé answer: 7 ✓", 0.5), Completion("", 0.0), Completion("7", 1.0)),
        ),
    ),
)

MESSAGES = {
    "hello": Hello(
        protocol_version=4,
        peer_id=PEER,
        schedule=SCHEDULE,
        current_round=-1,
        listen_addrs=("/ip4/127.0.0.1/tcp/40001", "/ip4/127.0.0.1/udp/40001/quic-v1"),
        model="llama-tiny-0.6m",
    ),
    "announce": RolloutAnnouncement(
        swarm_id=SWARM,
        round=12,
        stage=0,
        peer_id=PEER,
        batch_digest=hashlib.sha256(b"batch").digest(),
        group_count=2,
        size_bytes=512,
    ),
    "batch": BATCH,
    "fetch_req": FetchRequest(swarm_id=SWARM, round=12, stage=0, peer_id=OTHER_PEER),
    "fetch_resp": FetchResponse(found=True, envelope=b"\x00\x01\xfe\xff"),
    "fetch_resp_missing": FetchResponse(found=False, envelope=b""),
    "pushed": PushedAnnouncement(announcement=b"\x83sealed-announcement", envelope=b"\x83sealed-batch"),
    "reward": RewardReport(swarm_id=SWARM, round=12, stage=0, peer_id=PEER, reward=0.625),
    "winners": WinnersVote(swarm_id=SWARM, round=12, peer_id=PEER, winners=(PEER, OTHER_PEER)),
}

SEALED_NAME = "envelope_batch"
SEALED_MESSAGE = BATCH
