"""Signed envelopes: how a peer vouches for a message it sends, and how others check it.

Envelope wire format (msgpack map, strictly decoded, at most `limits.MAX_ENVELOPE_BYTES`):

    {"v": PROTOCOL_VERSION, "k": "env", "m": inner message bytes (protocol.codec),
     "pk": 32-byte Ed25519 public key, "sig": 64-byte Ed25519 signature}

The signature covers `SIGNING_DOMAIN + m`. The domain prefix keeps an envelope signature
from ever being valid as a signature over something else the same key signs (a libp2p
record, a pubsub message), since those use other prefixes.

The signer's id is derived from `pk` exactly as libp2p derives a peer id for an Ed25519
key: protobuf `PublicKey{Type: Ed25519 (1), Data: pk}` -> identity multihash
(0x00, length) -> base58btc. So the signer of an envelope is the same string as the
libp2p peer id of a host using that key, and a message's `peer_id` field can be checked
against it: a mismatch is `impersonation`. (Exception: FetchRequest.peer_id names the peer
whose batch is wanted, not the requester, so it is not checked.)
"""

from __future__ import annotations

import functools
import hashlib

import attrs
import base58
import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from protocol import codec, limits
from protocol.errors import ProtocolError
from protocol.messages import PROTOCOL_VERSION, FetchRequest, WireMessage

ENVELOPE_KIND = "env"
SIGNING_DOMAIN = b"swarmp2p/envelope/v1\x00"
MAX_INNER_BYTES = limits.MAX_BATCH_BYTES
"""Largest message that may be sealed (a batch is the largest thing a peer signs)."""

# libp2p's crypto.proto: KeyType Ed25519 = 1. Field 1 (Type, varint) = 0x08, field 2 (Data,
# length-delimited) = 0x12. Multihash identity code = 0x00.
_PROTOBUF_ED25519_PREFIX = bytes([0x08, 0x01, 0x12, limits.ED25519_PUBLIC_KEY_BYTES])
_IDENTITY_MULTIHASH = 0x00

_ENVELOPE_KEYS = ("v", "k", "m", "pk", "sig")

# Kinds whose `peer_id` names someone OTHER than the author, so it is not checked against
# the signer: a FetchRequest's peer_id is the peer whose batch is wanted.
_PEER_ID_IS_NOT_AUTHOR: frozenset[type] = frozenset({FetchRequest})


_BUFFER_TYPES = (bytes, bytearray, memoryview)  # a tuple: `bytes | ...` builds a union per call


def claimed_author(message: WireMessage) -> str | None:
    """The peer id a message claims as its author, or None when it claims none."""
    if type(message) in _PEER_ID_IS_NOT_AUTHOR:
        return None
    return getattr(message, "peer_id", None)


@attrs.frozen
class Opened:
    """A verified envelope: who signed it, what it says, and sha256 of the envelope bytes."""

    signer: str
    message: WireMessage
    digest: bytes


def _check_seed(seed: bytes) -> None:
    if not isinstance(seed, bytes) or len(seed) != 32:
        raise ValueError("an Ed25519 private key seed must be exactly 32 bytes")


def public_key_from_seed(seed: bytes) -> bytes:
    """The raw 32-byte Ed25519 public key of a 32-byte private key seed."""
    _check_seed(seed)
    return (
        Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    )


def peer_id_from_public_key(public_key: bytes) -> str:
    """The libp2p peer id (base58btc, "12D3KooW...") of a raw 32-byte Ed25519 public key."""
    if not isinstance(public_key, bytes) or len(public_key) != limits.ED25519_PUBLIC_KEY_BYTES:
        raise ValueError("an Ed25519 public key must be exactly 32 bytes")
    return _peer_id_of_valid_key(public_key)


@functools.lru_cache(maxsize=16_384)
def _peer_id_of_valid_key(public_key: bytes) -> str:
    # Memoized: every opened envelope and every seal derives a peer id, and base58 of the same
    # few keys again and again is a visible share of a busy node's (and the simulator's) time.
    # 16,384 holds the keys of the 10,000-peer simulations (their peers open in turn).
    serialized = _PROTOBUF_ED25519_PREFIX + public_key
    # Keys whose serialization is <= 42 bytes are inlined with the identity hash (libp2p spec).
    multihash = bytes([_IDENTITY_MULTIHASH, len(serialized)]) + serialized
    return base58.b58encode(multihash).decode("ascii")


def peer_id_from_seed(seed: bytes) -> str:
    """The libp2p peer id of the host whose Ed25519 private key seed is `seed`."""
    return peer_id_from_public_key(public_key_from_seed(seed))


def seal(message: WireMessage, private_key: bytes) -> bytes:
    """Encode and sign `message` with a 32-byte Ed25519 seed. Raises ProtocolError if the
    message is invalid or names another peer than the key's in its `peer_id`."""
    _check_seed(private_key)
    key, public_key = _signing_key(private_key)
    claimed = claimed_author(message)
    if claimed is not None and claimed != peer_id_from_public_key(public_key):
        raise ProtocolError("impersonation", f"sealing a message for {claimed} with another peer's key")
    inner = codec.encode(message)
    if len(inner) > MAX_INNER_BYTES:
        raise ProtocolError("oversized", f"envelope: inner message {len(inner)} bytes > {MAX_INNER_BYTES}")
    return msgpack.packb(
        {
            "v": PROTOCOL_VERSION,
            "k": ENVELOPE_KIND,
            "m": inner,
            "pk": public_key,
            "sig": key.sign(SIGNING_DOMAIN + inner),
        },
        use_bin_type=True,
    )


@functools.lru_cache(maxsize=16_384)
def _signing_key(seed: bytes) -> tuple[Ed25519PrivateKey, bytes]:
    # A node seals with the same seed every time; building the key object from the seed costs
    # about as much as signing. Bounded by the simulator's peers, which seal in turn: at 256 a
    # 1000-peer swarm missed on every seal (0.8% of its CPU rebuilding keys); 16,384 holds the
    # 10,000-peer runs' keys (a few MB).
    key = Ed25519PrivateKey.from_private_bytes(seed)
    return key, key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def open_envelope(data: bytes, *, max_size: int | None = None) -> Opened:
    """Decode, verify and unpack an envelope. Raises ProtocolError (only) on any bad input.

    `max_size` tightens the size cap for a context (e.g. gossip); it never loosens the
    global `limits.MAX_ENVELOPE_BYTES`.
    """
    if not isinstance(data, _BUFFER_TYPES):
        raise ProtocolError("bad_type", f"envelope: expected bytes, got {type(data).__name__}")
    data = bytes(data)
    cap = limits.MAX_ENVELOPE_BYTES if max_size is None else min(max_size, limits.MAX_ENVELOPE_BYTES)
    if len(data) > cap:
        raise ProtocolError("oversized", f"envelope: {len(data)} bytes > {cap}")
    frame = codec.unpack_strict(
        data, max_bin_len=MAX_INNER_BYTES, max_str_len=8, max_array_len=0, max_map_len=2 * len(_ENVELOPE_KEYS)
    )
    if not isinstance(frame, dict):
        raise ProtocolError("bad_type", f"envelope: expected map, got {type(frame).__name__}")
    for key in frame:
        if key not in _ENVELOPE_KEYS:
            raise ProtocolError("extra_key", f"envelope: unknown key {key!r}")
    for key in _ENVELOPE_KEYS:
        if key not in frame:
            raise ProtocolError("missing_key", f"envelope: missing {key!r}")
    version, kind = frame["v"], frame["k"]
    if isinstance(version, bool) or not isinstance(version, int) or version != PROTOCOL_VERSION:
        raise ProtocolError("bad_version", f"envelope: version {version!r}, expected {PROTOCOL_VERSION}")
    if kind != ENVELOPE_KIND:
        raise ProtocolError("unknown_kind", f"envelope: kind {kind!r}")
    inner, public_key, signature = frame["m"], frame["pk"], frame["sig"]
    for name, value in (("m", inner), ("pk", public_key), ("sig", signature)):
        if not isinstance(value, bytes):
            raise ProtocolError("bad_type", f"envelope: {name} must be bytes, got {type(value).__name__}")
    if len(public_key) != limits.ED25519_PUBLIC_KEY_BYTES:
        raise ProtocolError("bad_signature", f"envelope: public key is {len(public_key)} bytes, expected 32")
    if len(signature) != limits.ED25519_SIGNATURE_BYTES:
        raise ProtocolError("bad_signature", f"envelope: signature is {len(signature)} bytes, expected 64")
    # Verify before parsing the inner message: unauthenticated bytes get as little parsing as possible.
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, SIGNING_DOMAIN + inner)
    except (InvalidSignature, ValueError):
        raise ProtocolError("bad_signature", "envelope: signature does not verify") from None
    signer = peer_id_from_public_key(public_key)
    message = codec.decode(inner)
    claimed = claimed_author(message)
    if claimed is not None and claimed != signer:
        raise ProtocolError("impersonation", f"envelope: message claims {claimed} but is signed by {signer}")
    return Opened(signer=signer, message=message, digest=hashlib.sha256(data).digest())
