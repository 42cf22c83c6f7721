"""protocol/envelope.py: the frame's hostile-input bounds (key length, arrays, key count, the
inner message's size) each give their own counter key at their exact edge, and a bad key's
error says what a key must be."""

from __future__ import annotations

import hashlib

import msgpack
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from protocol import codec, limits
from protocol.envelope import (
    MAX_INNER_BYTES,
    SIGNING_DOMAIN,
    open_envelope,
    peer_id_from_public_key,
    peer_id_from_seed,
    public_key_from_seed,
    seal,
)
from protocol.errors import ProtocolError
from protocol.messages import PROTOCOL_VERSION, FetchResponse, RewardReport

SEED = hashlib.sha256(b"peer a").digest()


def reason_of(frame: dict[str, object]) -> str:
    with pytest.raises(ProtocolError) as caught:
        open_envelope(msgpack.packb(frame, use_bin_type=True))
    return caught.value.reason


def sealed_parts() -> dict[str, object]:
    report = RewardReport(swarm_id="swarm", round=7, stage=0, peer_id=peer_id_from_seed(SEED), reward=0.5)
    return msgpack.unpackb(seal(report, SEED), raw=False)


def test_a_frame_key_longer_than_any_envelope_key_is_oversized_from_nine_bytes() -> None:
    assert reason_of({**sealed_parts(), "eightchr": 1}) == "extra_key"
    assert reason_of({**sealed_parts(), "ninechars": 1}) == "oversized"


def test_an_array_anywhere_in_the_frame_is_refused_by_its_size() -> None:
    assert reason_of({**sealed_parts(), "m": []}) == "bad_type"  # empty: within the bound
    assert reason_of({**sealed_parts(), "m": [1]}) == "oversized"


def test_a_frame_may_name_up_to_ten_keys_before_it_is_oversized() -> None:
    five_extra = {f"x{i}": 0 for i in range(5)}
    assert reason_of({**sealed_parts(), **five_extra}) == "extra_key"
    assert reason_of({**sealed_parts(), **five_extra, "x5": 0}) == "oversized"


def _response_with_inner_size(size: int) -> FetchResponse:
    probe = FetchResponse(found=True, envelope=b"\x00" * 100_000)
    overhead = len(codec.encode(probe)) - 100_000
    return FetchResponse(found=True, envelope=b"\x00" * (size - overhead))


def test_the_largest_sealable_message_is_exactly_the_inner_cap() -> None:
    largest = _response_with_inner_size(MAX_INNER_BYTES)
    assert len(codec.encode(largest)) == MAX_INNER_BYTES
    assert open_envelope(seal(largest, SEED)).message == largest
    with pytest.raises(ProtocolError) as caught:
        seal(_response_with_inner_size(MAX_INNER_BYTES + 1), SEED)
    assert (
        str(caught.value)
        == f"oversized: envelope: inner message {MAX_INNER_BYTES + 1} bytes > {MAX_INNER_BYTES}"
    )


def test_bad_keys_say_what_a_key_must_be() -> None:
    with pytest.raises(ValueError) as raised:
        public_key_from_seed(b"x" * 31)
    assert str(raised.value) == "an Ed25519 private key seed must be exactly 32 bytes"
    with pytest.raises(ValueError) as raised:
        peer_id_from_public_key(b"x" * limits.ED25519_SIGNATURE_BYTES)
    assert str(raised.value) == "an Ed25519 public key must be exactly 32 bytes"


def error_of(data: object, **kwargs: int) -> str:
    with pytest.raises(ProtocolError) as caught:
        open_envelope(data, **kwargs)  # type: ignore[arg-type]
    return str(caught.value)


def packed(frame: dict[str, object]) -> bytes:
    return msgpack.packb(frame, use_bin_type=True)


def test_each_refusal_says_which_rule_the_envelope_broke() -> None:
    # A peer's rejection log and counters are all an operator sees of a hostile frame: each
    # line names the rule and the offending value.
    parts = sealed_parts()
    assert error_of("text") == "bad_type: envelope: expected bytes, got str"
    assert error_of(packed(parts), max_size=10) == f"oversized: envelope: {len(packed(parts))} bytes > 10"
    assert error_of(packed(7)) == "bad_type: envelope: expected map, got int"  # type: ignore[arg-type]
    assert error_of(packed({**parts, "x": 1})) == "extra_key: envelope: unknown key 'x'"
    assert (
        error_of(packed({k: v for k, v in parts.items() if k != "sig"}))
        == "missing_key: envelope: missing 'sig'"
    )
    assert (
        error_of(packed({**parts, "v": 99}))
        == f"bad_version: envelope: version 99, expected {PROTOCOL_VERSION}"
    )
    assert error_of(packed({**parts, "k": "msg"})) == "unknown_kind: envelope: kind 'msg'"
    # A float version equal to the current one is still not the version: it must be an int.
    float_version = {**parts, "v": float(PROTOCOL_VERSION)}
    assert error_of(packed(float_version)) == (
        f"bad_version: envelope: version {float(PROTOCOL_VERSION)!r}, expected {PROTOCOL_VERSION}"
    )
    assert error_of(packed({**parts, "m": "text"})) == "bad_type: envelope: m must be bytes, got str"
    assert error_of(packed({**parts, "pk": "text"})) == "bad_type: envelope: pk must be bytes, got str"
    assert error_of(packed({**parts, "sig": 5})) == "bad_type: envelope: sig must be bytes, got int"
    short_key = {**parts, "pk": parts["pk"][:31]}  # type: ignore[index]
    assert error_of(packed(short_key)) == "bad_signature: envelope: public key is 31 bytes, expected 32"
    long_signature = {**parts, "sig": parts["sig"] + b"\x00"}  # type: ignore[operator]
    assert error_of(packed(long_signature)) == "bad_signature: envelope: signature is 65 bytes, expected 64"
    flipped = {**parts, "sig": bytes(64)}
    assert error_of(packed(flipped)) == "bad_signature: envelope: signature does not verify"


def test_an_impersonation_names_the_claimed_author_and_the_signer() -> None:
    other = hashlib.sha256(b"peer b").digest()
    claimed, signer = peer_id_from_seed(SEED), peer_id_from_seed(other)
    report = RewardReport(swarm_id="swarm", round=7, stage=0, peer_id=claimed, reward=0.5)
    with pytest.raises(ProtocolError) as caught:
        seal(report, other)
    assert str(caught.value) == f"impersonation: sealing a message for {claimed} with another peer's key"
    inner = codec.encode(report)
    forged = {
        "v": PROTOCOL_VERSION,
        "k": "env",
        "m": inner,
        "pk": public_key_from_seed(other),
        "sig": Ed25519PrivateKey.from_private_bytes(other).sign(SIGNING_DOMAIN + inner),
    }
    assert (
        error_of(packed(forged))
        == f"impersonation: envelope: message claims {claimed} but is signed by {signer}"
    )
