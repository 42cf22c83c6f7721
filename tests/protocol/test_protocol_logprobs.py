"""A completion's sampling log-probs on the wire (protocol/logprobs.py): they survive encode,
seal, open and verification unchanged; they are signed (a relay cannot alter them); and a vector
that is oversized, misaligned, non-finite or positive is a counted rejection with its reason,
at the decoder, at verification, and through the admission inbox. A batch without them stays valid.
"""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import codec, limits
from protocol.admission import Accept, AdmissionRules, Fetch, Inbox, Reject
from protocol.envelope import SIGNING_DOMAIN, open_envelope, peer_id_from_seed, public_key_from_seed, seal
from protocol.errors import ProtocolError
from protocol.game import SingleStageGame
from protocol.logprobs import MAX_LOGPROBS_BYTES, logprobs_error, pack_logprobs, unpack_logprobs
from protocol.messages import (
    PROTOCOL_VERSION,
    Completion,
    QuestionGroup,
    RolloutAnnouncement,
    RolloutBatch,
)
from protocol.rounds import RoundMachine, RoundOpened
from protocol.verification import VerificationLimits, verify_batch
from tests.helpers.inbox import EchoRegistry

SWARM = "logprobs"
SEED = 23
ROUND = 4
ALICE = hashlib.sha256(b"logprobs alice").digest()
ME = hashlib.sha256(b"logprobs me").digest()


REGISTRY = EchoRegistry()
GAME = SingleStageGame(seed=SEED, tasks=("echo",), questions_per_round=2, registry=REGISTRY)

# float32-exact values, so what was packed is what comes back
float32_logprobs = st.lists(
    st.floats(min_value=-(2.0**100), max_value=0.0, width=32), min_size=1, max_size=64
)


def _groups(logprobs: bytes, peer: str) -> tuple[QuestionGroup, ...]:
    return tuple(
        QuestionGroup(q, (Completion(str(q.index), 1.0, logprobs), Completion("no", 0.0)))
        for q in GAME.questions(ROUND, 0, peer)
    )


def _batch(logprobs: bytes) -> RolloutBatch:
    peer = peer_id_from_seed(ALICE)
    return RolloutBatch(SWARM, ROUND, 0, peer, _groups(logprobs, peer))


def _raw_batch_bytes(logprobs: Any) -> bytes:
    """A batch's wire bytes written by hand, so that values `encode` refuses can be sent."""
    batch = _batch(b"")
    body = codec._check_record(codec.SCHEMAS[RolloutBatch], batch, "batch", encoding=True)
    body["groups"][0]["completions"][0]["logprobs"] = logprobs
    return msgpack.packb({"v": PROTOCOL_VERSION, "k": "batch", "b": body}, use_bin_type=True)


def _sign_raw(inner: bytes, seed: bytes) -> bytes:
    """An envelope exactly as `seal` writes one, around inner bytes `seal` would refuse."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    signature = Ed25519PrivateKey.from_private_bytes(seed).sign(SIGNING_DOMAIN + inner)
    frame = {
        "v": PROTOCOL_VERSION,
        "k": "env",
        "m": inner,
        "pk": public_key_from_seed(seed),
        "sig": signature,
    }
    return msgpack.packb(frame, use_bin_type=True)


def _inbox() -> Inbox:
    machine = RoundMachine()
    machine.handle(0, RoundOpened(ROUND, collect_until_ms=1000, round_ends_ms=2000))
    inbox = Inbox(AdmissionRules(swarm_id=SWARM, me=peer_id_from_seed(ME), seed=SEED), machine, GAME)
    inbox.open_round(ROUND, 0, connected=0)
    return inbox


def _fetch(inbox: Inbox, envelope: bytes) -> Any:
    """Alice announces `envelope` and the fetch returns it: the inbox's decision."""
    announcement = RolloutAnnouncement(
        SWARM, ROUND, 0, peer_id_from_seed(ALICE), hashlib.sha256(envelope).digest(), 2, len(envelope)
    )
    decision = inbox.heard(peer_id_from_seed(ALICE), seal(announcement, ALICE))
    assert isinstance(decision, Fetch), decision
    inbox.queued(decision.job)
    return inbox.fetched(decision.job, envelope, direct=True)


@given(float32_logprobs)
def test_logprobs_survive_encode_seal_open_and_verification(values: list[float]) -> None:
    packed = pack_logprobs(values)
    assert len(packed) == 4 * len(values)
    assert packed == struct.pack(f"<{len(values)}f", *values)  # float32, little-endian
    batch = _batch(packed)
    opened = open_envelope(seal(batch, ALICE))
    assert opened.message == batch
    carried = opened.message.groups[0].completions[0].logprobs
    assert unpack_logprobs(carried) == tuple(values)
    assert verify_batch(opened.message, REGISTRY, expected_questions=None, limits=VerificationLimits()).ok


def test_an_accepted_batch_hands_its_logprobs_to_training() -> None:
    packed = pack_logprobs([-0.25, -3.5, 0.0])
    inbox = _inbox()
    decision = _fetch(inbox, seal(_batch(packed), ALICE))
    assert isinstance(decision, Accept), decision
    assert all(group.completions[0].logprobs == packed for group in decision.groups)
    assert all(group.completions[1].logprobs == b"" for group in decision.groups)


def test_a_batch_without_logprobs_stays_valid() -> None:
    batch = _batch(b"")
    assert codec.decode(codec.encode(batch)) == batch
    assert verify_batch(batch, REGISTRY, expected_questions=None, limits=VerificationLimits()).ok
    assert isinstance(_fetch(_inbox(), seal(batch, ALICE)), Accept)


def test_logprobs_are_signed_a_relay_cannot_change_them() -> None:
    packed = pack_logprobs([-0.5, -1.25])
    envelope = seal(_batch(packed), ALICE)
    assert envelope.count(packed) == 2  # one completion of each of the two groups
    forged = envelope.replace(packed, pack_logprobs([-0.5, -9.0]), 1)
    with pytest.raises(ProtocolError) as caught:
        open_envelope(forged)
    assert caught.value.reason == "bad_signature"
    inbox = _inbox()
    assert _fetch(inbox, forged) == Reject("bad_signature", peer_id_from_seed(ALICE))
    assert inbox.rejections["bad_signature"] == 1


TOO_MANY = limits.MAX_COMPLETION_TOKENS + 1
BAD_VECTORS: list[tuple[str, bytes, str]] = [
    ("nan", pack_logprobs([-1.0, math.nan]), "non_finite"),
    ("inf", pack_logprobs([math.inf]), "non_finite"),
    ("minus_inf", pack_logprobs([-1.0, -math.inf, -2.0]), "non_finite"),
    ("inf_and_minus_inf", pack_logprobs([math.inf, -math.inf]), "non_finite"),
    ("positive", pack_logprobs([-1.0, 0.5]), "out_of_range"),
    ("tiny_positive", pack_logprobs([1e-30]), "out_of_range"),
    ("misaligned", pack_logprobs([-1.0]) + b"\x00", "malformed"),
    ("oversized", pack_logprobs([-1.0] * TOO_MANY), "oversized"),
]
# What verification (which holds batches that never met the codec) calls each of them.
VERIFY_REASON = {"oversized": "logprobs_too_long"}


@pytest.mark.parametrize(("name", "data", "reason"), BAD_VECTORS, ids=[v[0] for v in BAD_VECTORS])
def test_a_bad_vector_is_refused_by_encode_and_decode_with_its_reason(
    name: str, data: bytes, reason: str
) -> None:
    assert logprobs_error(data) is not None and logprobs_error(data)[0] == reason  # type: ignore[index]
    with pytest.raises(ProtocolError) as caught:
        codec.encode(_batch(data))
    assert caught.value.reason == reason
    with pytest.raises(ProtocolError) as caught:
        codec.decode(_raw_batch_bytes(data))
    assert caught.value.reason == reason


@pytest.mark.parametrize(("name", "data", "reason"), BAD_VECTORS, ids=[v[0] for v in BAD_VECTORS])
def test_a_signed_batch_with_a_bad_vector_is_a_counted_rejection(name: str, data: bytes, reason: str) -> None:
    inbox = _inbox()
    decision = _fetch(inbox, _sign_raw(_raw_batch_bytes(data), ALICE))
    assert decision == Reject(reason, peer_id_from_seed(ALICE))  # the signer is blamed
    assert inbox.rejections[reason] == 1
    assert inbox.current is not None and inbox.current.external == {}


@pytest.mark.parametrize(("name", "data", "reason"), BAD_VECTORS, ids=[v[0] for v in BAD_VECTORS])
def test_verification_rechecks_a_batch_built_in_memory(name: str, data: bytes, reason: str) -> None:
    verdict = verify_batch(_batch(data), REGISTRY, expected_questions=None, limits=VerificationLimits())
    assert not verdict.ok
    assert verdict.reason == VERIFY_REASON.get(reason, "bad_logprobs")
    game_verdict = GAME.verify(_batch(data))
    assert not game_verdict.ok and game_verdict.reason == verdict.reason


def test_verification_limits_may_cap_logprobs_below_the_wire() -> None:
    batch = _batch(pack_logprobs([-1.0] * 9))
    assert verify_batch(
        batch, REGISTRY, expected_questions=None, limits=VerificationLimits(max_logprobs=9)
    ).ok
    verdict = verify_batch(
        batch, REGISTRY, expected_questions=None, limits=VerificationLimits(max_logprobs=8)
    )
    assert verdict.reason == "logprobs_too_long"


def test_the_cap_is_the_completion_token_cap() -> None:
    assert MAX_LOGPROBS_BYTES == 4 * limits.MAX_COMPLETION_TOKENS
    at_cap = pack_logprobs([-1.0] * limits.MAX_COMPLETION_TOKENS)
    assert logprobs_error(at_cap) is None
    assert codec.decode(codec.encode(_batch(at_cap))) == _batch(at_cap)


def test_a_non_bytes_vector_is_bad_logprobs_not_a_crash() -> None:
    batch = _batch(b"")
    bad_group = QuestionGroup(
        batch.groups[0].question,
        (Completion("0", 0.0, [-1.0]), Completion("no", 0.0)),  # type: ignore[arg-type]
    )
    verdict = verify_batch(
        RolloutBatch(SWARM, ROUND, 0, batch.peer_id, (bad_group,)),
        REGISTRY,
        expected_questions=None,
        limits=VerificationLimits(),
    )
    assert verdict.reason == "bad_logprobs"
    with pytest.raises(ProtocolError) as caught:
        codec.decode(_raw_batch_bytes([-1.0]))
    assert caught.value.reason == "bad_type"
