"""The signed-peer-record memo (swarmp2p/net/signed_records.py): repeats skip the work,
anything else is checked as before. (The yamux credit rule: tests/net/test_net_yamux_credit.py.)"""

from __future__ import annotations

import libp2p.pubsub.gossipsub as gossipsub_module
import libp2p.pubsub.pubsub as pubsub_module
import multiaddr
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerstore import PeerStore, create_signed_peer_record
from libp2p.pubsub import utils as pubsub_utils
from libp2p.pubsub.pb import rpc_pb2

from swarmp2p.net import signed_records
from swarmp2p.net.counters import DropCounters
from swarmp2p.net.signed_records import SignedRecordMemo


class FakeHost:
    """What py-libp2p's consume reads from a host: its peerstore."""

    def __init__(self) -> None:
        self.peerstore = PeerStore()

    def get_peerstore(self) -> PeerStore:
        return self.peerstore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_peer(port: int) -> tuple[ID, bytes]:
    """A peer id and the bytes of its signed record for one listen address."""
    keys = create_new_key_pair()
    peer_id = ID.from_pubkey(keys.public_key)
    addr = multiaddr.Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")
    envelope = create_signed_peer_record(peer_id, [addr], keys.private_key)
    return peer_id, envelope.marshal_envelope()


def rpc_with(record: bytes | None) -> rpc_pb2.RPC:
    rpc = rpc_pb2.RPC()
    if record is not None:
        rpc.senderRecord = record
    return rpc


def counting_consume(calls: list[ID]):  # type: ignore[no-untyped-def]
    def consume(msg, host, peer_id):  # type: ignore[no-untyped-def]
        calls.append(peer_id)
        return pubsub_utils.maybe_consume_signed_record(msg, host, peer_id)

    return consume


def test_a_repeated_record_is_checked_once_and_its_addresses_are_stored() -> None:
    calls: list[ID] = []
    memo = SignedRecordMemo(counting_consume(calls), clock=Clock())
    host = FakeHost()
    peer, record = make_peer(4001)
    assert all(memo(rpc_with(record), host, peer) for _ in range(5))
    assert calls == [peer]  # py-libp2p's check ran once
    assert (memo.checked, memo.remembered) == (1, 4)
    assert multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/4001") in host.peerstore.addrs(peer)


def test_a_record_from_the_wrong_peer_is_refused_and_counted_every_time() -> None:
    """B relays A's record as its own: py-libp2p refuses it (the peer ids differ), and a refusal
    is never remembered, so the tenth try is checked (and counted) like the first."""
    calls: list[ID] = []
    memo = SignedRecordMemo(counting_consume(calls), clock=Clock())
    host = FakeHost()
    counters = DropCounters()
    memo.count_refusals(host, counters)
    _, record_of_a = make_peer(4001)
    peer_b, _ = make_peer(4002)
    assert not any(memo(rpc_with(record_of_a), host, peer_b) for _ in range(10))
    assert len(calls) == 10
    assert counters["gossip_bad_peer_record"] == 10


def test_garbage_records_are_refused_every_time() -> None:
    calls: list[ID] = []
    memo = SignedRecordMemo(counting_consume(calls), clock=Clock())
    peer, record = make_peer(4001)
    tampered = record[:-1] + bytes([record[-1] ^ 1])  # one bit of the signature flipped
    for data in (b"\x00garbage", tampered):
        assert not memo(rpc_with(data), FakeHost(), peer)
        assert not memo(rpc_with(data), FakeHost(), peer)
    assert len(calls) == 4


def test_a_remembered_record_is_checked_again_after_the_refresh_interval() -> None:
    calls: list[ID] = []
    clock = Clock()
    memo = SignedRecordMemo(counting_consume(calls), refresh_s=60.0, clock=clock)
    host = FakeHost()
    peer, record = make_peer(4001)
    assert memo(rpc_with(record), host, peer)
    clock.now += 59.0
    assert memo(rpc_with(record), host, peer)
    assert len(calls) == 1
    clock.now += 2.0
    assert memo(rpc_with(record), host, peer)
    assert len(calls) == 2


def test_new_record_bytes_and_another_host_are_checked() -> None:
    calls: list[ID] = []
    memo = SignedRecordMemo(counting_consume(calls), clock=Clock())
    host, other_host = FakeHost(), FakeHost()
    peer, record = make_peer(4001)
    assert memo(rpc_with(record), host, peer)
    assert memo(rpc_with(record), other_host, peer)  # its own peerstore: stored there too
    assert multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/4001") in other_host.peerstore.addrs(peer)
    keys = create_new_key_pair()
    peer2 = ID.from_pubkey(keys.public_key)
    at_5000, at_5001 = (multiaddr.Multiaddr(f"/ip4/127.0.0.1/tcp/{port}") for port in (5000, 5001))
    first = create_signed_peer_record(peer2, [at_5000], keys.private_key)
    moved = create_signed_peer_record(peer2, [at_5001], keys.private_key)
    assert memo(rpc_with(first.marshal_envelope()), host, peer2)
    assert memo(rpc_with(moved.marshal_envelope()), host, peer2)
    assert len(calls) == 4
    assert at_5001 in host.peerstore.addrs(peer2)


def test_an_rpc_without_a_record_is_accepted_without_a_check() -> None:
    calls: list[ID] = []
    memo = SignedRecordMemo(counting_consume(calls), clock=Clock())
    peer, _ = make_peer(4001)
    assert memo(rpc_with(None), FakeHost(), peer)
    assert calls == []


def test_the_memo_is_bounded() -> None:
    calls: list[ID] = []
    memo = SignedRecordMemo(counting_consume(calls), max_entries=3, clock=Clock())
    host = FakeHost()
    peers = [make_peer(4000 + i) for i in range(5)]
    for peer, record in peers:
        assert memo(rpc_with(record), host, peer)
    assert len(memo._consumed[host.peerstore]) == 3
    peer, record = peers[0]  # the oldest was dropped: checked again
    assert memo(rpc_with(record), host, peer)
    assert len(calls) == 6


def test_install_replaces_the_function_where_pubsub_and_gossipsub_look_it_up() -> None:
    memo = signed_records.install()
    assert signed_records.install() is memo
    assert pubsub_module.maybe_consume_signed_record is memo
    assert gossipsub_module.maybe_consume_signed_record is memo


def test_a_node_counts_gossip_rpcs_dropped_for_a_forged_peer_record() -> None:
    """Over a real connection: an RPC whose signed peer record is another peer's is dropped
    whole (as py-libp2p did: its message is not delivered) and now counted, each time; the same
    message with the sender's own record is delivered."""
    import trio
    from libp2p import new_host
    from libp2p.peer.peerinfo import info_from_p2p_addr
    from libp2p.peer.peerstore import env_to_send_in_RPC
    from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11
    from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX
    from libp2p.utils.varint import encode_varint_prefixed

    from swarmp2p.net import NetworkSettings, open_libp2p_network

    topic = "swarmp2p/test/records"
    sender_keys = create_new_key_pair()
    sender_id = ID.from_pubkey(sender_keys.public_key)
    _, record_of_another = make_peer(4001)

    def rpc_frame(data: bytes, seqno: int, record: bytes) -> bytes:
        msg = rpc_pb2.Message(
            data=data, topicIDs=[topic], from_id=sender_id.to_bytes(), seqno=seqno.to_bytes(8, "big")
        )
        msg.signature = sender_keys.private_key.sign(PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString())
        msg.key = sender_keys.public_key.serialize()
        out = rpc_pb2.RPC(publish=[msg], senderRecord=record)
        out.subscriptions.append(rpc_pb2.RPC.SubOpts(subscribe=True, topicid=topic))
        return encode_varint_prefixed(out.SerializeToString())

    async def main() -> None:
        with trio.fail_after(60):
            async with open_libp2p_network(create_new_key_pair(), NetworkSettings()) as node:
                inbox = await node.subscribe(topic)
                sender = new_host(key_pair=sender_keys)
                async with sender.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
                    await sender.connect(info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0])))
                    stream = await sender.new_stream(ID.from_base58(node.local_peer_id), [PROTOCOL_ID_V11])
                    for seqno in (1, 2):
                        await stream.write(rpc_frame(b"forged record", seqno, record_of_another))
                    with trio.fail_after(10):
                        while node.counters["gossip_bad_peer_record"] < 2:
                            await trio.sleep(0.05)
                    own_record, _ = env_to_send_in_RPC(sender)  # what py-libp2p itself attaches
                    await stream.write(rpc_frame(b"own record", 3, own_record))
                    with trio.fail_after(10):
                        assert (await inbox.receive()).data == b"own record"  # the forged ones never came
                    assert node.counters["gossip_bad_peer_record"] == 2
                    await stream.reset()

    trio.run(main)


def test_the_own_record_to_attach_is_reused_per_host_until_the_refresh() -> None:
    made: list[object] = []

    def make(host: object) -> tuple[bytes, bool]:
        made.append(host)
        return f"record {len(made)}".encode(), True

    clock = Clock()
    memo = signed_records.OwnRecordMemo(make, refresh_s=5.0, clock=clock)
    host, other_host = FakeHost(), FakeHost()
    assert memo(host) == (b"record 1", True)
    clock.now += 4.9
    assert memo(host) == (b"record 1", False)  # reused: py-libp2p's answer for a cached record
    assert memo(other_host) == (b"record 2", True)  # each host its own
    clock.now += 0.2
    assert memo(host) == (b"record 3", True)  # past the refresh: asked again
    assert made == [host, other_host, host]


def test_install_routes_the_own_record_where_pubsub_gossipsub_and_floodsub_look_it_up() -> None:
    import libp2p.pubsub.floodsub as floodsub_module

    memo = signed_records.install_own()
    assert signed_records.install() is not None
    assert signed_records.install_own() is memo
    for module in (pubsub_module, gossipsub_module, floodsub_module):
        assert module.env_to_send_in_RPC is memo
