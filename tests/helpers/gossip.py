"""Raw gossipsub traffic for the network tests: a test topic, fast network settings, signed
messages and RPC frames built by hand."""

from __future__ import annotations

from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX
from libp2p.utils.varint import encode_varint_prefixed

from swarmp2p.net import NetworkSettings

TOPIC = "swarmp2p/test/drops"

FAST = NetworkSettings(handler_timeout_s=2.0, peer_exchange_interval_s=0.5, upkeep_interval_s=0.2)


def message(origin: KeyPair, data: bytes, seqno: int, *, signer: KeyPair | None = None) -> rpc_pb2.Message:
    """A pubsub message from `origin`, signed by `signer` (None: unsigned)."""
    msg = rpc_pb2.Message(
        data=data,
        topicIDs=[TOPIC],
        from_id=ID.from_pubkey(origin.public_key).to_bytes(),
        seqno=seqno.to_bytes(8, "big"),
    )
    if signer is not None:
        msg.signature = signer.private_key.sign(PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString())
        msg.key = signer.public_key.serialize()
    return msg


def rpc(*messages: rpc_pb2.Message) -> bytes:
    out = rpc_pb2.RPC(publish=list(messages))
    out.subscriptions.append(rpc_pb2.RPC.SubOpts(subscribe=True, topicid=TOPIC))
    return encode_varint_prefixed(out.SerializeToString())
