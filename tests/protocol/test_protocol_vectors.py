"""Golden vectors: the wire format cannot change by accident."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

VECTORS = Path(__file__).resolve().parent / "vectors"
sys.path.insert(0, str(VECTORS))

from golden_fixtures import MESSAGES, PEER, SEALED_MESSAGE, SEALED_NAME, SIGNING_SEED  # noqa: E402

from protocol.codec import decode, encode  # noqa: E402
from protocol.envelope import open_envelope, seal  # noqa: E402
from protocol.messages import KIND_OF, PROTOCOL_VERSION  # noqa: E402


def test_every_kind_has_a_vector():
    assert {KIND_OF[type(message)] for message in MESSAGES.values()} == set(KIND_OF.values())


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_message_vector(name):
    committed = (VECTORS / f"{name}.bin").read_bytes()
    assert encode(MESSAGES[name]) == committed
    assert decode(committed) == MESSAGES[name]


def test_sealed_envelope_vector():
    committed = (VECTORS / f"{SEALED_NAME}.bin").read_bytes()
    assert seal(SEALED_MESSAGE, SIGNING_SEED) == committed
    opened = open_envelope(committed)
    assert opened.message == SEALED_MESSAGE
    assert opened.signer == PEER
    assert opened.digest == hashlib.sha256(committed).digest()
    assert PEER.startswith("12D3KooW")


def test_the_hello_vector_carries_the_version_and_the_schedule_s_game():
    # The game travels by name in the signed schedule (protocol 4): a swarm of a second game
    # with the same stage count as another is told apart by this field alone.
    hello = decode((VECTORS / "hello.bin").read_bytes())
    assert PROTOCOL_VERSION == hello.protocol_version == 4
    assert hello.schedule.game == "answer-verify"
    assert b"answer-verify" in (VECTORS / "hello.bin").read_bytes()
