"""The attacks over real py-libp2p, shared by tests/net/test_net_attacks.py and
bench/bench_attack.py.

- `run_pair`: two honest Peers (the simulator's cheap policy, real libp2p hosts on 127.0.0.1,
  real time, the node's hello protocol and gossip checks) that train on each other's rollouts;
  an attack runs beside them and each finished round is recorded.
- The attacker, a separate OS process (`python -m netlab.attack_kit MODE ...`) so that it has its
  own CPU as an outside host would: `flood` (gossip at the highest rate it can write, from many
  throwaway keys and one key, validly and wrongly signed), `dht` (validly signed large and many
  records under our namespace, records outside it, malformed keys) and `replay` (a signed hello
  of the target's neighbour, re-sent long after it was fresh).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX
from libp2p.utils.varint import encode_varint_prefixed

from protocol.envelope import seal
from protocol.messages import RolloutAnnouncement, SwarmSchedule
from swarmp2p.identity import Identity
from swarmp2p.net import NetworkSettings
from swarmp2p.peer_settings import announce_topic, batch_dht_key

SWARM = "attack"
FAST = NetworkSettings(handler_timeout_s=2.0, peer_exchange_interval_s=0.5, upkeep_interval_s=0.2)
HONEST_SEEDS = (b"a" * 32, b"b" * 32)


class Sybil:
    """A throwaway key: one libp2p key pair and the same key as an envelope signer."""

    def __init__(self, name: str) -> None:
        self.seed = hashlib.sha256(f"sybil-{name}-{os.getpid()}".encode()).digest()
        self.identity = Identity.from_seed(self.seed)
        self.from_id = ID.from_base58(self.identity.peer_id).to_bytes()
        self.public_key = self.identity.key_pair.public_key.serialize()
        self.seqno = 0

    def message(self, topic: str, data: bytes, *, signed: bool = True) -> rpc_pb2.Message:
        """A gossip message from this key; `signed=False` gives it a wrong signature."""
        self.seqno += 1
        msg = rpc_pb2.Message(
            data=data, topicIDs=[topic], from_id=self.from_id, seqno=self.seqno.to_bytes(8, "big")
        )
        if signed:
            payload = PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString()
            msg.signature = self.identity.key_pair.private_key.sign(payload)
        else:
            msg.signature = os.urandom(64)
        msg.key = self.public_key
        return msg

    def announcement(self, swarm: str, round_number: int) -> bytes:
        body = RolloutAnnouncement(swarm, round_number, 0, self.identity.peer_id, os.urandom(32), 2, 2000)
        return seal(body, self.seed)


def signed_batch(sybil: Sybil, swarm: str, round_number: int, stage: int, kib: int) -> bytes:
    """A validly signed RolloutBatch envelope of about `kib` KiB, 60 at least (what a DHT record
    holds): 4 groups of completions of 15,000 characters, one each at the least."""
    from protocol.messages import Completion, QuestionGroup, QuestionRef, RolloutBatch

    per_group = max(1, kib // 60)  # completions of 15,000 characters, 4 groups
    groups = tuple(
        QuestionGroup(QuestionRef("t", 0, i), tuple(Completion("x" * 15000, 0.0) for _ in range(per_group)))
        for i in range(4)
    )
    return seal(RolloutBatch(swarm, round_number, stage, sybil.identity.peer_id, groups), sybil.seed)


def gossip_frame(messages: list[rpc_pb2.Message], topics: list[str]) -> bytes:
    out = rpc_pb2.RPC(publish=messages)
    for topic in topics:
        out.subscriptions.append(rpc_pb2.RPC.SubOpts(subscribe=True, topicid=topic))
    return encode_varint_prefixed(out.SerializeToString())


# ---- the honest pair ------------------------------------------------------------------------


@dataclass
class Pair:
    """What an attack sees of the running honest pair."""

    nets: list[Any]
    peers: list[Any]
    clock: Any
    round_ms: int
    hello_stats: list[dict[str, int]]
    schedule: Any = None
    records: list[dict[int, Any]] = field(default_factory=lambda: [{}, {}])
    snapshots: list[dict[str, Any]] = field(default_factory=list)  # status of each, at the end

    def attacker_args(
        self, mode: str, seconds: float, keys: int, start_round: int | None = None
    ) -> list[str]:
        """Arguments of `python -m netlab.attack_kit` aimed at both nodes, on their clock. With
        `start_round` the attacker gets ready (imports, keys, connections) at once and attacks
        from that round's start: its start-up then costs no round of the pair's."""
        genesis = time.time() - self.clock.now_ms() / 1000
        targets = [net.listen_addrs()[0] for net in self.nets]
        start = [] if start_round is None else ["--start-round", str(start_round)]
        return [
            *(mode, "--targets", *targets, "--seconds", str(seconds), "--keys", str(keys)),
            *("--round-ms", str(self.round_ms), "--genesis", f"{genesis:.3f}", "--swarm", SWARM),
            *start,
        ]

    def round_start_in_s(self, round_number: int) -> float:
        """Seconds from now until `round_number` starts on the pair's clock (negative: begun)."""
        return (round_number * self.round_ms - self.clock.now_ms()) / 1000

    def current_round(self) -> int:
        return int(self.clock.now_ms() // self.round_ms)

    def status(self, index: int) -> dict[str, Any]:
        """What swarmp2p/node.py serves as /api/status (the parts these nodes have)."""
        from swarmp2p.dashboard.feed import peer_faults

        peer, net = self.peers[index], self.nets[index]
        return {
            **peer.status(),
            "network": net.status(),
            "hellos": dict(self.hello_stats[index]),
            "peers": sorted(net.connected_peers()),
            "peer_rejections": peer_faults(peer),
        }

    def trained(self) -> dict[int, tuple[tuple[str, ...], tuple[str, ...]]]:
        """Per round both finished: whom each node trained on."""
        a, b = self.records
        return {
            r: (a[r].external_peers_trained_on, b[r].external_peers_trained_on)
            for r in sorted(set(a) & set(b))
        }

    def rounds_lost(self) -> list[int]:
        """Rounds both finished in which a node did not get the other's rollouts: its batch was
        not fetched and verified (accepted). What the network and admission decide; whether
        the node then trains on them is the sampler's (`rounds_not_trained`)."""
        a, b = self.records
        ids = [net.local_peer_id for net in self.nets]
        return [
            r
            for r in sorted(set(a) & set(b))
            if ids[1] not in a[r].accepted_peers or ids[0] not in b[r].accepted_peers
        ]

    def why_lost(self) -> dict[int, list[tuple[int, dict[str, int]]]]:
        """For each lost round: per node, (batches accepted, rejections by reason)."""
        return {
            r: [(len(book[r].accepted_peers), dict(book[r].rejected)) for book in self.records]
            for r in self.rounds_lost()
        }

    def rounds_not_trained(self) -> list[int]:
        """Rounds both finished in which a node did not train on the other's rollouts. Beyond
        `rounds_lost`, the sampler drops question groups whose advantage is zero everywhere
        (all completions scored alike): with the simulator's policy that happened to about 1
        node-round in 20 with no attack at all, so it is reported, not asserted."""
        ids = [net.local_peer_id for net in self.nets]
        return [r for r, (a, b) in self.trained().items() if ids[1] not in a or ids[0] not in b]


Attack = Callable[[Pair], Awaitable[None]]


def run_pair(attack: Attack, *, round_ms: int = 4000, settings: NetworkSettings = FAST) -> Pair:
    """Run two honest Peers until `attack(pair)` returns, then return the pair with both nodes'
    final status in `snapshots`. The pair starts on a round boundary, after a second to
    connect."""
    from simulator.policy import CheckpointStore, SimPolicy
    from simulator.registry import SimTaskRegistry
    from swarmp2p.clocks import TrioClock
    from swarmp2p.hello import OwnHello, open_hellos, publish_hellos, receive_hellos
    from swarmp2p.net import open_libp2p_network
    from swarmp2p.node_setup import record_check
    from swarmp2p.peer import Peer, PeerSettings
    from swarmp2p.schedule import ScheduleCoordinator

    registry = SimTaskRegistry()
    peer_settings = PeerSettings(swarm_id=SWARM, seed=5, tasks=registry.task_names(), fetch_timeout_s=1.0)
    store = CheckpointStore()
    result: list[Pair] = []

    async def offload(fn: Any, *args: Any) -> Any:
        await trio.sleep(0)
        return fn(*args)

    async def main() -> None:
        clock = TrioClock(0)
        schedule = SwarmSchedule(SWARM, 0, round_ms, 1, 5, tasks=registry.task_names())
        async with (
            open_libp2p_network(Identity.from_seed(HONEST_SEEDS[0]).key_pair, settings) as net_a,
            open_libp2p_network(Identity.from_seed(HONEST_SEEDS[1]).key_pair, settings) as net_b,
            trio.open_nursery() as nursery,
        ):
            pair = Pair([net_a, net_b], [], clock, round_ms, [], schedule)
            result.append(pair)
            for net in pair.nets:
                net.set_record_check(record_check)  # as swarmp2p/node.py does
            await net_b.connect(net_a.listen_addrs()[0])
            await trio.sleep(-(clock.now_ms() + 1000) % round_ms / 1000 + 1.0)
            for index, (net, seed) in enumerate(zip(pair.nets, HONEST_SEEDS, strict=True)):
                own = OwnHello(Identity.from_seed(seed), net, schedule, "sim", pair.current_round)
                hellos, stats = await open_hellos(
                    net,
                    own,
                    swarm_id=SWARM,
                    current_round=pair.current_round,
                    max_announce_bytes=peer_settings.max_announce_bytes,
                )
                pair.hello_stats.append(stats)
                nursery.start_soon(publish_hellos, net, own, SWARM, 1.0)
                nursery.start_soon(receive_hellos, net, hellos, stats, schedule, lambda _line: None)
                peer = Peer(
                    peer_settings,
                    seed,
                    net,
                    ScheduleCoordinator(schedule, clock),
                    SimPolicy(net.local_peer_id, registry, seed=5, store=store),
                    registry,
                    clock,
                    offload=offload,
                    on_round_complete=lambda record, book=pair.records[index]: book.__setitem__(
                        record.round, record
                    ),
                )
                pair.peers.append(peer)
                await nursery.start(peer.run)
            await attack(pair)
            pair.snapshots = [pair.status(0), pair.status(1)]
            nursery.cancel_scope.cancel()

    trio.run(main)
    return result[0]


async def wait_round_done(pair: Pair, round_number: int) -> None:
    """Until both nodes have finished (recorded) `round_number`, or a later round; bounded: three
    round lengths past its end."""
    limit = max(0.0, pair.round_start_in_s(round_number + 1)) + 3 * pair.round_ms / 1000
    with trio.move_on_after(limit):
        while any(max(book, default=-1) < round_number for book in pair.records):
            await trio.sleep(0.1)


async def wait_rounds(pair: Pair, rounds: int) -> None:
    """Until both nodes have finished `rounds` more rounds (bounded: 3x their length)."""
    start = [len(book) for book in pair.records]
    with trio.move_on_after(rounds * pair.round_ms / 1000 * 3):
        while any(len(book) - s < rounds for book, s in zip(pair.records, start, strict=True)):
            await trio.sleep(0.1)


async def run_attacker(args: list[str], seconds: float, start_in_s: float = 0.0) -> dict[str, Any]:
    """Run `python -m netlab.attack_kit ARGS` (inherits PYTHONPATH); its report (last stdout line,
    JSON). Killed after `start_in_s` (its wait for `--start-round`) + `seconds` + 60 s of start-up
    slack."""
    command = [sys.executable, "-m", "netlab.attack_kit", *args]
    with trio.fail_after(max(0.0, start_in_s) + seconds + 60):
        done = await trio.run_process(
            command, capture_stdout=True, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"}
        )
    lines = done.stdout.decode().strip().splitlines()
    report = dict(json.loads(lines[-1])) if lines else {}
    return {**report, "exit_code": done.returncode}


async def hello_replay(pair: Pair, settings: NetworkSettings, *, junk: int) -> dict[str, Any]:
    """Hello replay, from a spy in this process: it records three gossip messages of node B's
    hellos and signs 50 hellos of throwaway keys (dead addresses) in the same round, waits three
    rounds, sends node A `junk` fresh messages (to push the recorded ids out of a seen-cache
    smaller than that), then all of the recorded and old hellos. Returns how many A refused
    as stale or replayed (`refused`) of those `sent`, its hellos accepted meanwhile and its
    peer book size before and after."""
    from libp2p.peer.id import ID as PeerID

    from protocol.messages import PROTOCOL_VERSION, Hello
    from swarmp2p.hello import hello_topic
    from swarmp2p.net import open_libp2p_network

    a, b = pair.nets
    topic = hello_topic(SWARM)
    seen: dict[str, Any] = {}
    async with open_libp2p_network(create_new_key_pair(), settings) as spy:
        raw = await spy.pubsub.subscribe(topic)  # the gossip messages themselves, signed
        await spy.connect(b.listen_addrs()[0])
        recorded = []
        with trio.fail_after(20):
            while len(recorded) < 3:
                message = await raw.get()
                if PeerID(message.from_id).to_base58() == b.local_peer_id:
                    recorded.append(message)
        signed_in = pair.current_round()
        dead = ("/ip4/10.255.0.1/tcp/1",)
        old = []
        for sybil in (Sybil(f"hello-{i}") for i in range(50)):
            hello = Hello(PROTOCOL_VERSION, sybil.identity.peer_id, pair.schedule, signed_in, dead, "m")
            old.append(sybil.message(topic, seal(hello, sybil.seed)))
        with trio.fail_after(30):
            while pair.current_round() < signed_in + 3:
                await trio.sleep(0.1)
        stream = await spy.host.new_stream(PeerID.from_base58(a.local_peer_id), [PROTOCOL_ID_V11])
        if junk:
            keys = [Sybil(f"junk-{i}") for i in range(-(-junk // 30))]
            messages = [k.message(announce_topic(SWARM), b"junk %d" % i) for i in range(30) for k in keys]
            await stream.write(gossip_frame(messages[:junk], [topic]))
            with trio.fail_after(15):
                while a.counters["gossip_seen_cache_evicted"] == 0:
                    await trio.sleep(0.05)
        before = dict(pair.hello_stats[0])
        seen["known_before"] = a.status()["known_peers"]
        await stream.write(gossip_frame([*recorded, *old], [topic]))

        def refused() -> int:
            stats = pair.hello_stats[0]
            return sum(stats[k] - before[k] for k in ("hellos_stale", "hellos_replayed"))

        with trio.move_on_after(15):
            while refused() < len(recorded) + len(old):
                await trio.sleep(0.1)
        seen["refused"], seen["sent"] = refused(), len(recorded) + len(old)
        seen["accepted"] = pair.hello_stats[0]["hellos_accepted"] - before["hellos_accepted"]
        seen["known_after"] = a.status()["known_peers"]
    return seen


# ---- the attacker process -------------------------------------------------------------------


class GossipWriter:
    """Raw gossip streams from the attacker's host to each target, reopened when a node
    resets one (as an attacker would): `write(data)` sends to every target, counting resets."""

    def __init__(self, host: Any, targets: list[str], sent: dict[str, Any]) -> None:
        self.host = host
        self.infos = [info_from_p2p_addr(multiaddr.Multiaddr(addr)) for addr in targets]
        self.streams: list[Any] = [None] * len(self.infos)
        self.sent = sent
        sent.setdefault("resets", 0)
        sent.setdefault("reopen_failed", 0)

    async def reopen(self, index: int) -> None:
        try:
            with trio.fail_after(5):
                await self.host.connect(self.infos[index])
                self.streams[index] = await self.host.new_stream(self.infos[index].peer_id, [PROTOCOL_ID_V11])
        except Exception:
            self.sent["reopen_failed"] += 1
            await trio.sleep(0.2)

    async def write(self, data: bytes, deadline: float) -> int:
        """Write `data` to every target before `deadline` (trio time); how many took it whole."""
        written = 0
        for index in range(len(self.infos)):
            if self.streams[index] is None:
                await self.reopen(index)
                continue
            with trio.move_on_after(max(0.01, deadline - trio.current_time())) as scope:
                try:
                    await self.streams[index].write(data)
                except Exception:
                    self.sent["resets"] += 1
                    self.streams[index] = None
                    continue
            if not scope.cancelled_caught:
                written += 1
        return written

    async def close(self) -> None:
        for stream in self.streams:
            if stream is not None:
                with trio.move_on_after(1):
                    try:
                        await stream.close()
                    except Exception:
                        pass


@contextlib.asynccontextmanager
async def attacker_gossip(targets: list[str], sent: dict[str, Any]) -> AsyncIterator[GossipWriter]:
    """A throwaway host (an outside attacker) with a raw gossip stream open to every target."""
    host = new_host(key_pair=create_new_key_pair())
    async with host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
        writer = GossipWriter(host, targets, sent)
        for index in range(len(targets)):
            await writer.reopen(index)
        yield writer


def round_now(genesis: float, round_ms: int) -> int:
    """The honest pair's round (their round 0 began at wall time `genesis`)."""
    return int((time.time() - genesis) * 1000 // round_ms)


async def until_round(genesis: float, round_ms: int, start_round: int | None) -> None:
    """Sleep until `start_round` begins on the pair's clock (None: not at all)."""
    if start_round is not None:
        await trio.sleep(max(0.0, genesis + start_round * round_ms / 1000 - time.time()))


async def flood(
    targets: list[str],
    seconds: float,
    swarm: str,
    round_ms: int,
    keys: int,
    genesis: float,
    start_round: int | None = None,
) -> dict[str, Any]:
    """Gossip at the highest rate the streams take, for `seconds`, in frames of 102 messages:
    announcements of `keys` throwaway keys for the current and the next round (validly signed,
    re-signed each round), junk validly signed by one key, and wrongly signed messages (fresh
    seqnos, so none is deduplicated before the signature check). The valid ones are signed
    once per round, so the attacker spends its time writing."""
    topic, hello = announce_topic(swarm), f"swarmp2p/{swarm}/hello"
    sybils = [Sybil(f"flood-{i}") for i in range(keys)]
    one = Sybil("flood-one")
    junk = [one.message(topic if i % 2 else hello, os.urandom(200)) for i in range(keys)]
    sent: dict[str, Any] = {"frames": 0, "messages": 0, "valid_announcements": 0, "junk_signed": 0}
    sent["bad_signature"] = 0
    valid: list[rpc_pb2.Message] = []
    signed_for = -1
    async with attacker_gossip(targets, sent) as writer:
        await until_round(genesis, round_ms, start_round)
        deadline = trio.current_time() + seconds
        i = 0
        while trio.current_time() < deadline:
            now = round_now(genesis, round_ms)
            if now != signed_for:
                signed_for = now
                valid = [s.message(topic, s.announcement(swarm, r)) for r in (now, now + 1) for s in sybils]
            batch: list[rpc_pb2.Message] = []
            for _ in range(34):
                batch.append(valid[i % len(valid)])
                batch.append(junk[i % len(junk)])
                batch.append(sybils[i % len(sybils)].message(topic, b"x" * 200, signed=False))
                i += 1
            written = await writer.write(gossip_frame(batch, [topic, hello]), deadline)
            sent["frames"] += written
            sent["messages"] += written * len(batch)
            for kind in ("valid_announcements", "junk_signed", "bad_signature"):
                sent[kind] += written * 34
        await writer.close()
    return sent


async def next_round_sybils(
    targets: list[str],
    seconds: float,
    swarm: str,
    round_ms: int,
    keys: int,
    genesis: float,
    start_round: int | None = None,
) -> dict[str, Any]:
    """The next-round sybil attack: as each round opens, `keys` throwaway keys announce the NEXT
    round to every target (validly signed gossip and envelopes), for `seconds`."""
    topic = announce_topic(swarm)
    sybils = [Sybil(f"next-{i}") for i in range(keys)]
    sent: dict[str, Any] = {"rounds": 0, "messages": 0}
    async with attacker_gossip(targets, sent) as writer:
        await until_round(genesis, round_ms, start_round)
        deadline = trio.current_time() + seconds
        while trio.current_time() < deadline:
            now = round_now(genesis, round_ms)
            batch = gossip_frame([s.message(topic, s.announcement(swarm, now + 1)) for s in sybils], [topic])
            sent["messages"] += keys * await writer.write(batch, deadline)
            sent["rounds"] += 1
            next_start = genesis + (now + 1) * round_ms / 1000
            await trio.sleep(max(0.0, next_start - time.time() + 0.05))
        await writer.close()
    return sent


async def dht_abuse(
    targets: list[str],
    seconds: float,
    swarm: str,
    round_ms: int,
    keys: int,
    genesis: float,
    start_round: int | None = None,
) -> dict[str, Any]:
    """PUT_VALUE straight to each target for `seconds`: validly signed records near the 1 MiB
    limit under our namespace from one key (many rounds and stages), 60 KiB ones from `keys`
    throwaway keys (which the per-owner cap does not bound: the store's total cap does), and
    records outside the namespace and under malformed keys."""
    from libp2p.kad_dht.pb.kademlia_pb2 import Message, Record

    one = Sybil("dht-one")
    sybils = [Sybil(f"dht-{i}") for i in range(keys)]
    sent: dict[str, Any] = {
        "puts": 0,
        "big": 0,
        "small": 0,
        "foreign": 0,
        "malformed": 0,
        "bad_record_signature": 0,
    }
    sent.update(refused_streams=0, refused_by_libp2p=0, owner=one.identity.peer_id)
    host = new_host(key_pair=one.identity.key_pair)
    async with host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
        infos = [info_from_p2p_addr(multiaddr.Multiaddr(addr)) for addr in targets]
        for info in infos:
            await host.connect(info)
        await until_round(genesis, round_ms, start_round)

        def signed(sybil: Sybil, round_number: int, stage: int, kib: int) -> tuple[str, bytes]:
            return batch_dht_key(swarm, round_number, stage, sybil.identity.peer_id), signed_batch(
                sybil, swarm, round_number, stage, kib
            )

        author = one.identity.key_pair.public_key.serialize()

        async def put(info: Any, key: bytes, value: bytes) -> None:
            await put_record(info, Record(key=key, value=value))

        async def put_record(info: Any, record: Any) -> None:
            message = Message(type=Message.MessageType.PUT_VALUE, key=record.key, record=record)
            try:
                with trio.fail_after(5):
                    stream = await host.new_stream(info.peer_id, ["/ipfs/kad/1.0.0"])
                    await stream.write(encode_varint_prefixed(message.SerializeToString()))
                    with trio.move_on_after(1):
                        await stream.read(64 * 1024)
                    await stream.close()
            except Exception as error:
                sent["refused_streams"] += 1
                errors = sent.setdefault("errors", {})  # why, for the report: a few kinds
                kind = type(error).__name__
                if kind in errors or len(errors) < 5:
                    errors[kind] = errors.get(kind, 0) + 1
            sent["puts"] += 1

        deadline = trio.current_time() + seconds
        i = 0
        while trio.current_time() < deadline:
            now_round = round_now(genesis, round_ms)
            for info in infos:
                key, value = signed(one, now_round + i % 2, i % 3, 960)
                await put(info, key.encode(), value)
                sent["big"] += 1
                for sybil in sybils[(i * 8) % keys : (i * 8) % keys + 8]:
                    key, value = signed(sybil, now_round, 0, 60)
                    await put(info, key.encode(), value)
                    sent["small"] += 1
                await put(
                    info, f"/other/{swarm}/{now_round}/0/{one.identity.peer_id}".encode(), os.urandom(1024)
                )
                sent["foreign"] += 1
                await put(info, f"/swarmp2p//{now_round}//{i}".encode(), os.urandom(1024))
                sent["malformed"] += 1
                # A record our validator accepts whose libp2p record signature does not verify.
                key, value = signed(one, now_round, 0, 60)
                record = Record(key=key.encode(), value=value, author=author, signature=os.urandom(64))
                await put_record(info, record)
                sent["bad_record_signature"] += 1
                # What py-libp2p's handler refuses before any validator: a key that is not
                # UTF-8, a record over its 1 MiB limit.
                await put(info, b"/swarmp2p/\xff\xfe/" + os.urandom(8), os.urandom(1024))
                await put(info, f"/swarmp2p/{swarm}/{now_round}/0/x".encode(), os.urandom(1100 * 1024))
                sent["refused_by_libp2p"] += 2
            i += 1
    return sent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m netlab.attack_kit")
    parser.add_argument("mode", choices=["flood", "sybils", "dht"])
    parser.add_argument("--targets", nargs="+", required=True)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--swarm", default=SWARM)
    parser.add_argument("--round-ms", type=int, default=4000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--genesis", type=float, required=True, help="wall time of the pair's round 0")
    parser.add_argument("--start-round", type=int, default=None, help="attack from this round's start")
    args = parser.parse_args(argv)
    attack = {"flood": flood, "sybils": next_round_sybils, "dht": dht_abuse}[args.mode]
    started = time.process_time()
    at = (args.round_ms, args.keys, args.genesis, args.start_round)
    report = trio.run(attack, args.targets, args.seconds, args.swarm, *at)
    report["cpu_s"] = round(time.process_time() - started, 2)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
