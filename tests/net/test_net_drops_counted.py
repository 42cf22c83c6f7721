"""The last drops that were silent: DHT PUT_VALUE requests without a record, gossip messages on
topics the node does not subscribe to, and the gossip a paused forwarder's stream still held
when its peer left. A bare libp2p host plays the sender over real py-libp2p (it writes the
wire format by hand, so it can send what a real implementation never would)."""

from __future__ import annotations

from typing import Any

import attrs
import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.kad_dht.pb.kademlia_pb2 import Message
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX
from libp2p.utils.varint import encode_varint_prefixed

from swarmp2p.dashboard import normalize_status, render_metrics
from swarmp2p.net import NetworkSettings, open_libp2p_network
from tests.helpers.waiting import wait_until

FAST = NetworkSettings(handler_timeout_s=2.0, peer_exchange_interval_s=0.5, upkeep_interval_s=0.2)
TOPIC = "swarmp2p/test/counted"
DHT_PROTOCOL = "/ipfs/kad/1.0.0"


class Sybil:
    """A throwaway key that signs gossip messages as a real origin would."""

    def __init__(self) -> None:
        self.key_pair: KeyPair = create_new_key_pair()
        self.from_id = ID.from_pubkey(self.key_pair.public_key).to_bytes()
        self.seqno = 0

    def message(self, topic: str, data: bytes) -> rpc_pb2.Message:
        self.seqno += 1
        msg = rpc_pb2.Message(
            data=data, topicIDs=[topic], from_id=self.from_id, seqno=self.seqno.to_bytes(8, "big")
        )
        payload = PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString()
        msg.signature = self.key_pair.private_key.sign(payload)
        msg.key = self.key_pair.public_key.serialize()
        return msg


def gossip_frame(messages: list[rpc_pb2.Message], topics: list[str]) -> bytes:
    """One length-prefixed gossip RPC publishing `messages`, subscribing to `topics`."""
    out = rpc_pb2.RPC(publish=messages)
    for topic in topics:
        out.subscriptions.append(rpc_pb2.RPC.SubOpts(subscribe=True, topicid=topic))
    return encode_varint_prefixed(out.SerializeToString())


def exported(status: dict[str, Any], kind: str) -> float:
    """The node's drop counter `kind` as /metrics shows it."""
    text = render_metrics(normalize_status({"network": status}), 0)[0].decode()
    prefix = f'swarmp2p_network_drops_total{{kind="{kind}"}} '
    values = [float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix)]
    assert len(values) == 1, (prefix, values)
    return values[0]


def test_dht_put_value_requests_without_a_record_are_counted() -> None:
    """py-libp2p resets a PUT_VALUE that carries no record (a warning, which the node silences);
    100 of them are 100 refusals in `dht_refused_by_libp2p` (on main: none). A request the
    handler serves (GET_VALUE of an unknown key) is not counted."""

    async def main() -> None:
        with trio.fail_after(90):
            async with open_libp2p_network(create_new_key_pair(), FAST) as node:
                sender = new_host(key_pair=create_new_key_pair())
                async with sender.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
                    info = info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0]))
                    await sender.connect(info)
                    key = f"/swarmp2p/s/1/0/{node.local_peer_id}".encode()

                    async def send(message: Message) -> bytes:
                        stream = await sender.new_stream(info.peer_id, [DHT_PROTOCOL])
                        await stream.write(encode_varint_prefixed(message.SerializeToString()))
                        answer = b""
                        with trio.move_on_after(2):
                            try:
                                answer = await stream.read(64 * 1024)
                            except Exception:
                                answer = b""  # reset: the handler refused it
                        try:
                            await stream.close()
                        except Exception:
                            pass
                        return answer

                    answer = await send(Message(type=Message.MessageType.GET_VALUE, key=key))
                    assert answer  # served: the hand-made wire format is right
                    assert node.counters["dht_refused_by_libp2p"] == 0
                    for _ in range(100):
                        assert await send(Message(type=Message.MessageType.PUT_VALUE, key=key)) == b""
                    await wait_until(lambda: node.counters["dht_refused_by_libp2p"] >= 100)
                    status = node.status()
                    assert status["drops"]["dht_refused_by_libp2p"] == 100
                    assert status["drops"]["dht_rejected"] == 100
                    assert exported(status, "dht_refused_by_libp2p") == 100

    trio.run(main)


def test_gossip_on_topics_the_node_does_not_subscribe_to_is_counted() -> None:
    """py-libp2p skips a published message none of whose topics we subscribe to, without a
    word. 300 of them (on main: counted nowhere) are 300 in `gossip_unsubscribed_topic`; a
    message on a subscribed topic is delivered and not counted there."""
    other = "swarmp2p/test/not-ours"

    async def main() -> None:
        with trio.fail_after(90):
            async with open_libp2p_network(create_new_key_pair(), FAST) as node:
                inbox = await node.subscribe(TOPIC)
                sender = new_host(key_pair=create_new_key_pair())
                async with sender.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
                    info = info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0]))
                    await sender.connect(info)
                    stream: Any = await sender.new_stream(info.peer_id, [PROTOCOL_ID_V11])
                    keys = [Sybil() for _ in range(30)]
                    for i in range(10):
                        batch = [key.message(other, b"elsewhere %d" % i) for key in keys]
                        await stream.write(gossip_frame(batch, [other]))
                    await stream.write(gossip_frame([keys[0].message(TOPIC, b"ours")], [TOPIC]))
                    with trio.fail_after(10):
                        assert (await inbox.receive()).data == b"ours"
                    await wait_until(lambda: node.counters["gossip_unsubscribed_topic"] >= 300)
                    status = node.status()
                    assert status["drops"]["gossip_unsubscribed_topic"] == 300
                    assert exported(status, "gossip_unsubscribed_topic") == 300

    trio.run(main)


# Every place a message the sender wrote can end up in the node, when nobody reads the inbox
# and the topic's validator refuses everything it sees.
OUTCOMES = (
    "gossip_forwarder_rate_limited",
    "gossip_origin_rate_limited",
    "gossip_validator_rejected",
    "gossip_seen_duplicate",
    "gossip_bad_signature",
    "gossip_score_gated",
    "gossip_blacklisted",
    "gossip_unread_when_peer_left",
)


def test_what_a_paused_stream_still_held_when_its_peer_left_is_counted() -> None:
    """A connected host forwards past its allowance (burst 5, then 0.5 a second): its stream is
    paused for 10 s (net/gossip.py `_forwarder_allowed`), so the frames it keeps writing wait in
    the node's read-ahead and yamux buffers. Then it disconnects. py-libp2p clears a closed
    connection's stream buffers, and on main those frames' messages were counted nowhere
    (every message written is now accounted for, by the counters in OUTCOMES)."""
    settings = attrs.evolve(FAST, forwarder_rate_per_s=0.5, forwarder_burst=5.0)

    async def main() -> None:
        with trio.fail_after(120):
            async with open_libp2p_network(create_new_key_pair(), settings) as node:
                await node.subscribe(TOPIC)
                node.set_gossip_validator(TOPIC, lambda origin, data: "refused")
                sender = new_host(key_pair=create_new_key_pair())
                keys = [Sybil() for _ in range(64)]
                written = 0
                async with sender.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
                    info = info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0]))
                    await sender.connect(info)
                    stream: Any = await sender.new_stream(info.peer_id, [PROTOCOL_ID_V11])
                    # The first frame takes the burst and starts the pause.
                    await stream.write(gossip_frame([key.message(TOPIC, b"first") for key in keys], [TOPIC]))
                    written += len(keys)
                    await wait_until(lambda: node.counters["gossip_forwarder_paused"] == 1)
                    # Frames the paused reader does not take (each write returns once it is sent).
                    for i in range(24):
                        frame = gossip_frame([key.message(TOPIC, b"held %d" % i) for key in keys], [TOPIC])
                        with trio.move_on_after(2) as scope:
                            await stream.write(frame)
                        if scope.cancelled_caught:
                            break  # the node's receive window is full
                        written += len(keys)
                    assert written >= 8 * len(keys)
                    await trio.sleep(0.5)
                    unaccounted_before_leaving = written - sum(node.counters[k] for k in OUTCOMES)
                    assert unaccounted_before_leaving >= 6 * len(keys)  # held, not yet read
                    await sender.disconnect(info.peer_id)  # as a process that exits: the socket closes
                # The sender has left; the reader wakes when the pause ends (10 s).
                sender_id = sender.get_id().to_base58()
                await wait_until(lambda: sender_id not in node.connected_peers(), 10)
                with trio.move_on_after(20):
                    while sum(node.counters[k] for k in OUTCOMES) < written:
                        await trio.sleep(0.05)
                counted = {k: node.counters[k] for k in OUTCOMES}
                assert sum(counted.values()) >= written, (written, counted)
                # A write cut off by its timeout sent part of a frame (its messages never arrived
                # whole and are not counted), or, rarely, all of it just before the timeout.
                assert sum(node.counters[k] for k in OUTCOMES) <= written + len(keys), counted
                # The pause does not outlive the stream it guarded (one entry per forwarder
                # ever paused, before).
                assert ID.from_base58(sender_id) not in node.pubsub._paused_until
                status = node.status()
                unread = status["drops"]["gossip_unread_when_peer_left"]
                assert unread >= 6 * len(keys), status["drops"]
                assert exported(status, "gossip_unread_when_peer_left") == unread

    trio.run(main)


def test_dht_lookups_py_libp2p_refuses_are_counted_apart_and_long_keys_are_counted() -> None:
    """Between two nodes: py-libp2p's `put_value` looks for a record key's closest peers with a
    FIND_NODE for that key, which py-libp2p's handler refuses (not a peer id): an honest put
    refused at one hop, counted as `dht_lookup_refused` and not as a refused record. And a
    GET_VALUE for a key over 128 bytes (a swarm id of 64 bytes makes one) is refused by the
    serving peer, so the record cannot be fetched from it: counted in `dht_refused_by_libp2p`
    (on the code before, neither was counted anywhere)."""

    async def main() -> None:
        with trio.fail_after(90):
            async with (
                open_libp2p_network(create_new_key_pair(), FAST) as a,
                open_libp2p_network(create_new_key_pair(), FAST) as b,
            ):
                await b.connect(a.listen_addrs()[0])
                await wait_until(
                    lambda: a.dht.get_routing_table_size() >= 1 and b.dht.get_routing_table_size() >= 1
                )
                short = f"s/12/0/{a.local_peer_id}"
                await a.dht_put(short, b"record")
                assert await b.dht_get(short) == b"record"
                await wait_until(
                    lambda: a.counters["dht_lookup_refused"] + b.counters["dht_lookup_refused"] >= 1
                )
                assert a.counters["dht_rejected"] == b.counters["dht_rejected"] == 0
                long = f"{'s' * 64}/12/0/{a.local_peer_id}"
                assert len(f"/swarmp2p/{long}") > 128
                await a.dht_put(long, b"record")  # stored at a, which refuses to serve it
                assert await b.dht_get(long) is None
                await wait_until(lambda: a.counters["dht_refused_by_libp2p"] >= 1)
                assert exported(a.status(), "dht_lookup_refused") == a.counters["dht_lookup_refused"]

    trio.run(main)
