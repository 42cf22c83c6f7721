"""Envelopes: sealed messages open to the same message and signer; any tampering is caught."""

from __future__ import annotations

import hashlib

import attrs
import msgpack
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from protocol import codec, envelope, limits
from protocol.envelope import (
    open_envelope,
    peer_id_from_public_key,
    peer_id_from_seed,
    public_key_from_seed,
    seal,
)
from protocol.errors import ProtocolError
from protocol.messages import PROTOCOL_VERSION, RewardReport
from tests.helpers.strategies import authored_by, ed25519_seeds, fetch_requests, wire_messages

SEED_A = hashlib.sha256(b"peer a").digest()
SEED_B = hashlib.sha256(b"peer b").digest()
PEER_A = peer_id_from_seed(SEED_A)
PEER_B = peer_id_from_seed(SEED_B)


def report(peer_id: str = PEER_A) -> RewardReport:
    return RewardReport(swarm_id="swarm", round=7, stage=0, peer_id=peer_id, reward=0.5)


def frame(data: bytes) -> dict:
    return msgpack.unpackb(data, raw=False)


def reason_of(data: bytes, **kwargs) -> str:
    with pytest.raises(ProtocolError) as caught:
        open_envelope(data, **kwargs)
    return caught.value.reason


@given(seed=ed25519_seeds)
def test_peer_id_matches_libp2p(seed):
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.peer.id import ID

    key_pair = create_new_key_pair(seed)
    assert key_pair.public_key.to_bytes() == public_key_from_seed(seed)
    assert peer_id_from_public_key(public_key_from_seed(seed)) == str(ID.from_pubkey(key_pair.public_key))


@given(seed=ed25519_seeds, message=wire_messages)
def test_seal_then_open_round_trips(seed, message):
    signer = peer_id_from_seed(seed)
    message = authored_by(message, signer)
    sealed = seal(message, seed)
    assert len(sealed) <= limits.MAX_ENVELOPE_BYTES
    opened = open_envelope(sealed)
    assert opened.message == message
    assert opened.signer == signer
    assert opened.digest == hashlib.sha256(sealed).digest()
    assert seal(message, seed) == sealed  # Ed25519 is deterministic: same message, same bytes


@given(seed=ed25519_seeds, request=fetch_requests)
def test_fetch_request_names_the_wanted_peer_not_the_signer(seed, request):
    # A FetchRequest's peer_id is whose batch is wanted, so it is not an impersonation.
    assert open_envelope(seal(request, seed)).signer == peer_id_from_seed(seed)


def test_seal_refuses_to_sign_for_another_peer():
    with pytest.raises(ProtocolError) as caught:
        seal(report(PEER_B), SEED_A)
    assert caught.value.reason == "impersonation"


def test_forged_author_with_a_valid_signature_is_impersonation():
    # B signs a message claiming to be from A: the signature is valid, the claim is not.
    inner = codec.encode(report(PEER_A))
    key = Ed25519PrivateKey.from_private_bytes(SEED_B)
    forged = msgpack.packb(
        {
            "v": PROTOCOL_VERSION,
            "k": "env",
            "m": inner,
            "pk": public_key_from_seed(SEED_B),
            "sig": key.sign(envelope.SIGNING_DOMAIN + inner),
        },
        use_bin_type=True,
    )
    assert reason_of(forged) == "impersonation"


def test_swapped_public_key_is_a_bad_signature():
    parts = frame(seal(report(), SEED_A))
    parts["pk"] = public_key_from_seed(SEED_B)
    assert reason_of(msgpack.packb(parts, use_bin_type=True)) == "bad_signature"


def test_signature_without_domain_prefix_is_rejected():
    inner = codec.encode(report())
    parts = frame(seal(report(), SEED_A))
    parts["sig"] = Ed25519PrivateKey.from_private_bytes(SEED_A).sign(inner)
    assert reason_of(msgpack.packb(parts, use_bin_type=True)) == "bad_signature"


@given(
    message=wire_messages,
    field=st.sampled_from(["m", "sig", "pk"]),
    position=st.integers(min_value=0),
    bit=st.integers(0, 7),
)
def test_any_bit_flip_in_signed_parts_is_a_bad_signature(message, field, position, bit):
    sealed = seal(authored_by(message, PEER_A), SEED_A)
    parts = frame(sealed)
    value = bytearray(parts[field])
    value[position % len(value)] ^= 1 << bit
    parts[field] = bytes(value)
    assert reason_of(msgpack.packb(parts, use_bin_type=True)) == "bad_signature"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda parts: parts.update(v=PROTOCOL_VERSION + 1), "bad_version"),
        (lambda parts: parts.update(v=True), "bad_version"),
        (lambda parts: parts.update(k="envelope"), "unknown_kind"),
        (lambda parts: parts.update(x=1), "extra_key"),
        (lambda parts: parts.pop("sig"), "missing_key"),
        (lambda parts: parts.update(m="text"), "bad_type"),
        (lambda parts: parts.update(pk=parts["pk"][:31]), "bad_signature"),
        (lambda parts: parts.update(sig=parts["sig"] + b"\x00"), "bad_signature"),
    ],
)
def test_bad_envelope_frames_are_rejected_with_their_reason(change, reason):
    parts = frame(seal(report(), SEED_A))
    change(parts)
    assert reason_of(msgpack.packb(parts, use_bin_type=True)) == reason


def test_max_size_tightens_the_cap():
    sealed = seal(report(), SEED_A)
    assert open_envelope(sealed, max_size=len(sealed)).signer == PEER_A
    assert reason_of(sealed, max_size=len(sealed) - 1) == "oversized"
    assert (
        reason_of(b"\x00" * (limits.MAX_ENVELOPE_BYTES + 1), max_size=10 * limits.MAX_ENVELOPE_BYTES)
        == "oversized"
    )


def test_a_valid_signature_over_an_invalid_message_is_still_rejected():
    inner = codec.encode(report()).replace(b"swarm", b"\xff\xfe\xfd\xfc\xfb")
    key = Ed25519PrivateKey.from_private_bytes(SEED_A)
    data = msgpack.packb(
        {
            "v": PROTOCOL_VERSION,
            "k": "env",
            "m": inner,
            "pk": public_key_from_seed(SEED_A),
            "sig": key.sign(envelope.SIGNING_DOMAIN + inner),
        },
        use_bin_type=True,
    )
    assert reason_of(data) == "malformed"


def test_bad_seeds_are_value_errors():
    for bad in (b"", b"x" * 31, b"x" * 33, "x" * 32):
        with pytest.raises(ValueError):
            public_key_from_seed(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        peer_id_from_public_key(b"x" * 31)


@st.composite
def mutated_envelopes(draw):
    data = bytearray(seal(authored_by(draw(wire_messages), PEER_A), SEED_A))
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, max(len(data) - 1, 0)))
        operation = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        if operation == "flip" and data:
            data[position] ^= 1 << draw(st.integers(0, 7))
        elif operation == "truncate":
            del data[position:]
        elif operation == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif operation == "delete" and data:
            del data[position : position + draw(st.integers(1, 8))]
    return bytes(data)


@given(st.one_of(mutated_envelopes(), st.binary(max_size=256)))
def test_mutated_or_random_envelopes_raise_only_protocol_error(data):
    try:
        opened = open_envelope(data)
    except ProtocolError as error:
        assert error.reason
    else:
        # Some mutations only touch msgpack framing (e.g. int width) and keep a valid envelope.
        assert opened.signer == PEER_A


def test_garbage_envelopes_are_malformed_not_oversized():
    # A map header promising 15 entries, an array header, a map32 claiming ~4 GiB.
    for data in (b"\x8f\x01", b"\xdf\xff\xff\xff\xf0" + bytes(16), b"\xde\x01\x00"):
        assert reason_of(data) == "malformed", data


@given(st.one_of(st.binary(max_size=256), mutated_envelopes()))
def test_random_envelope_bytes_are_oversized_only_when_they_are(data):
    try:
        open_envelope(data)
    except ProtocolError as error:
        if error.reason == "oversized":
            assert len(data) > limits.MAX_ENVELOPE_BYTES or well_formed_msgpack(data), (error, data)


def well_formed_msgpack(data: bytes) -> bool:
    try:
        msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:
        return False
    return True


def test_opened_is_frozen():
    opened = open_envelope(seal(report(), SEED_A))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        opened.signer = PEER_B  # type: ignore[misc]
