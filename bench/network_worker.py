"""bench_network.py's worker process: one libp2p node that joins the swarm, says ready, and at
the agreed start publishes, hears, fetches and times the batches, then writes its result file
(the file protocol is bench_network.py's `run_config`). Started as `bench_network.py --worker`."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import resource
import time
from pathlib import Path
from typing import Any

TOPIC = "bench/announce"
PUSH_ENV = "SWARMP2P_BENCH_PUSH_MAX_BYTES"
FETCH_SLOTS_ENV = "SWARMP2P_BENCH_FETCH_SLOTS"
MESH_ENV = "SWARMP2P_BENCH_MESH_DEGREE"
RELAY_ALL_ENV = "SWARMP2P_BENCH_RELAY_ALL"
RELAY_BACKUP_ENV = "SWARMP2P_BENCH_RELAY_BACKUP"


def worker(args: argparse.Namespace) -> None:
    import attrs
    import msgpack
    import trio
    from libp2p.crypto.ed25519 import create_new_key_pair

    from swarmp2p.net import NetworkSettings, open_libp2p_network
    from swarmp2p.peer_settings import PeerSettings
    from swarmp2p.ports import NetworkError

    out = Path(args.out)
    sizes = [int(s) for s in args.sizes.split(",")]

    async def main() -> None:
        settings = NetworkSettings(
            # In a namespace the worker listens on that namespace's switch address (its loopback
            # is its own: peers elsewhere could not dial 127.0.0.1).
            listen=(f"/ip4/{args.host}/tcp/0",),
            bootstrap=(args.bootstrap,) if args.bootstrap else (),
            libp2p_default_connection_manager=args.conn_manager == "libp2p-default",
        )
        push_max_bytes = os.environ.get(PUSH_ENV)  # --push-max-bytes, handed down by the orchestrator
        if push_max_bytes is not None:
            settings = attrs.evolve(settings, push_max_bytes=int(push_max_bytes))
        if os.environ.get(RELAY_ALL_ENV):  # --relay-all
            settings = attrs.evolve(settings, skip_relay_to_origin_neighbours=False)
        if os.environ.get(RELAY_BACKUP_ENV):  # --relay-backup
            settings = attrs.evolve(settings, relay_backup_copy=True)
        mesh = os.environ.get(MESH_ENV)  # --mesh-degree D,LOW,HIGH
        if mesh:
            degree, low, high = (int(part) for part in mesh.split(","))
            settings = attrs.evolve(settings, mesh_degree=degree, mesh_degree_low=low, mesh_degree_high=high)
        async with open_libp2p_network(create_new_key_pair(), settings) as net:
            payloads: dict[int, bytes] = {}

            async def serve(requester: str, data: bytes) -> bytes:
                return payloads.get(int(data.decode()), b"")

            net.set_request_handler(serve)
            channel = await net.subscribe(TOPIC)
            if args.index == 0:
                write_atomically(out / "addr", net.listen_addrs()[0])
            # Ready once connected to most of the swarm (peer exchange builds the mesh) and, where
            # relays skip the author's neighbours, once they can: every mesh peer's list known
            # and ours told (LibP2PNetwork.relay_view). Before that, each relay goes to mesh
            # peers that hold the author's copy already: a first round 2 s after connecting
            # carried ~2,300 duplicates at 20 processes in the namespaces (docs/benchmarks.md).
            # Both waits count in the swarm's start-up.
            want = min(args.procs - 1, settings.target_peers)
            while len(net.connected_peers()) < want:
                await trio.sleep(0.2)
            relays_settled = await wait_for_relays(net, settings, want)
            (out / f"ready-{args.index}").write_text("1")
            start_file = out / "start"
            while not start_file.exists():
                await trio.sleep(0.05)
            start = float(start_file.read_text())
            # Idle: connected, subscribed, nothing published until `start`.
            idle_before = resource.getrusage(resource.RUSAGE_SELF)
            idle_from = time.time()
            await trio.sleep(max(0.0, start - idle_from))
            idle_after = resource.getrusage(resource.RUSAGE_SELF)
            idle_cpu = idle_after.ru_utime + idle_after.ru_stime - idle_before.ru_utime - idle_before.ru_stime
            idle_s = max(1e-9, time.time() - idle_from)
            # --all-to-all: every process publishes in every exchange (a swarm round: each peer
            # shares its batch and wants everyone else's); message id = exchange * procs + publisher.
            fanin = args.procs if args.all_to_all else 1
            received: dict[int, float] = {}
            heard: dict[int, float] = {}  # when the announcement arrived (gossip latency)
            published: dict[int, float] = {}
            errors: dict[str, int] = {}
            cpu_before = resource.getrusage(resource.RUSAGE_SELF)

            # As many fetches at once as the node's fetch workers (PeerSettings.fetch_concurrency);
            # the rest wait their turn, as queued fetch jobs do in the node.
            node_workers = attrs.fields(PeerSettings).fetch_concurrency.default
            slots = int(os.environ.get(FETCH_SLOTS_ENV, "0")) or node_workers
            fetch_slots = trio.Semaphore(slots)

            async def fetch(msg_id: int, sender: str) -> None:
                for _attempt in range(3):
                    try:
                        async with fetch_slots:
                            data = await net.request(sender, str(msg_id).encode(), timeout_s=10)
                    except NetworkError as error:
                        reason = re.sub(r"12D3Koo\w+", "<peer>", str(error))[:120]
                        errors[reason] = errors.get(reason, 0) + 1
                        continue
                    if len(data) == expected_size(msg_id):
                        received[msg_id] = time.time()
                        return

            def expected_size(msg_id: int) -> int:
                return sizes[msg_id // (args.messages * fanin)]

            async def listen(nursery: trio.Nursery) -> None:
                async for message in channel:
                    decoded = msgpack.unpackb(message.data)
                    msg_id = decoded["id"]
                    heard[msg_id] = time.time()
                    if len(decoded.get("data", b"")) == expected_size(msg_id):
                        received[msg_id] = heard[msg_id]
                        continue
                    nursery.start_soon(fetch, msg_id, message.transport_sender)

            total = len(sizes) * args.messages * fanin
            cpu_marks: list[float] = []  # CPU seconds when each batch size's exchanges begin
            # At each exchange's start and at the end: CPU seconds, duplicates received so far
            # (py-libp2p's seen-cache), connections (--per-round).
            round_marks: list[tuple[float, int, int]] = []

            def mark_round() -> None:
                duplicates = net.counters.snapshot().get("gossip_seen_duplicate", 0)
                round_marks.append((cpu_seconds(), duplicates, len(net.connected_peers())))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(listen, nursery)
                for msg_id in range(total):
                    at = start + (msg_id // fanin) * args.interval
                    await trio.sleep(max(0.0, at - time.time()))
                    if msg_id % (args.messages * fanin) == 0:
                        cpu_marks.append(cpu_seconds())
                    if msg_id % fanin == 0:
                        mark_round()
                    if msg_id % args.procs == args.index:
                        payloads[msg_id] = os.urandom(expected_size(msg_id))
                        published[msg_id] = time.time()
                        # As the node does (swarmp2p/pushed.py): a batch up to the network's
                        # push_max_bytes rides in its announcement; a bigger one is fetched.
                        body: dict[str, Any] = {"id": msg_id}
                        if len(payloads[msg_id]) <= net.push_max_bytes:
                            body["data"] = payloads[msg_id]
                        await net.publish(TOPIC, msgpack.packb(body))
                # Lost = not here 30 s after the last publish; until then a batch is only late.
                # Every process keeps serving until all are done: one that left early would
                # make the others' late fetches from it look like network losses.
                with trio.move_on_after(30.0):
                    while len(received) + len(published) < total:
                        await trio.sleep(0.1)
                    (out / f"done-{args.index}").write_text("1")
                    while not all((out / f"done-{i}").exists() for i in range(args.procs)):
                        await trio.sleep(0.1)
                nursery.cancel_scope.cancel()
            cpu_marks.append(cpu_seconds())
            mark_round()
            cpu_after = resource.getrusage(resource.RUSAGE_SELF)
            cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
            result = {
                "index": args.index,
                "peer_id": net.local_peer_id,
                "received": received,
                "heard": heard,
                "errors": errors,
                "published": published,
                "cpu_s": cpu,
                # Per batch size: the last size's share runs on through the end-of-run wait.
                "cpu_by_size": [b - a for a, b in itertools.pairwise(cpu_marks)],
                "idle_cpu_s": idle_cpu,
                "round_marks": round_marks,
                "idle_s": idle_s,
                "drops": net.counters.snapshot(),
                "relays_settled": relays_settled,
            }
            (out / f"result-{args.index}.json").write_text(json.dumps(result))

    trio.run(main)


RELAYS_SETTLE_MAX_S = 30.0
"""How long a worker waits for its relays to settle before it says ready anyway (counted as
unsettled in the table's notes): a mesh that never fills must not hang the bench."""


async def wait_for_relays(net: Any, settings: Any, want: int) -> bool:
    """Until the mesh holds at least min(`want`, mesh_degree_low) peers, all of whom have told
    us their connections, no exchange with a mesh joiner is in flight, and our mesh has been
    told our current connections; True if that came within RELAYS_SETTLE_MAX_S. Without the
    relay skip (`--relay-all`) there is nothing to wait for."""
    import trio

    if not settings.skip_relay_to_origin_neighbours:
        return True
    enough = min(want, settings.mesh_degree_low)
    with trio.move_on_after(RELAYS_SETTLE_MAX_S):
        while not net.relays_settled(enough):
            await trio.sleep(0.1)
        return True
    return False


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so that a reader polling for the file never sees it empty: the
    processes poll `addr` and `start` for existence and read them at once (a reader that beat
    the write read '' and died on float(''): a whole hivemind run of 20 "crashed" that way)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
