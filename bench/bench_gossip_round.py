"""CPU of one gossip round without contention: N nodes in ONE process, all connected and
subscribed, each publishing one batch per round; CPU per round and per delivery, and the share
spent in the relay decision (the router's `publish`, run for every message received).

bench_network.py measures the same exchange across N processes on the machine's cores, where
the processes' work overlaps and a round's latency is its total CPU over the cores; this one
shows what a delivery costs. A/B a change by running it from two checkouts in turn
(`PYTHONPATH=<other checkout>`), interleaved. `--compare-read-ahead` A/Bs the gossip streams'
read-ahead (swarmp2p/net/gossip.py `READ_AHEAD_BYTES`) in one run: its rounds alternate with it
on and off in the same swarm, and the summary gives the median of each and their ratio.
`--stream M` measures the other case: two nodes, one publishing to the other in bursts of 5, in
blocks of 250 alternating read-ahead on and off (M batches each way of reading, 2 x M in all);
CPU per message of both nodes.

    python bench/bench_gossip_round.py --nodes 20 --rounds 4
    python bench/bench_gossip_round.py --nodes 20 --rounds 12 --compare-read-ahead   # read-ahead on/off
    python bench/bench_gossip_round.py --stream 3000      # one node streaming to another, read-ahead on/off
    python bench/bench_gossip_round.py --nodes 15 --settle 150 --idle-s 30 --rounds 0   # idle only
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from contextlib import AsyncExitStack
from typing import Any

import attrs
import msgpack
import trio
from rich.console import Console
from rich.table import Table

TOPIC = "swarmp2p/bench/gossip-round"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--size", type=int, default=10_000, help="batch bytes (rides in the announcement)")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds connected before the first round")
    parser.add_argument(
        "--idle-s", type=float, default=0.0, help="also measure the silent swarm's CPU over this many seconds"
    )
    parser.add_argument(
        "--compare-read-ahead",
        action="store_true",
        help="alternate rounds with the gossip streams' read-ahead on and off (baseline: off)",
    )
    parser.add_argument(
        "--stream",
        type=int,
        default=0,
        metavar="M",
        help="two nodes, one streaming to the other: M batches with read-ahead and M without",
    )
    args = parser.parse_args()
    # As the node does: py-libp2p's routine churn (a dial that lands while 20 nodes shut down)
    # logs warnings with tracebacks that Python would print bare on stderr.
    from swarmp2p.node_logging import configure_logging

    configure_logging("warning")
    if args.stream:
        _print_stream(trio.run(_stream, args))
        return
    idle: list[float] = []
    rows = trio.run(_rounds, args, idle)
    if idle:
        print(f"idle: {1000 * idle[0] / args.idle_s / args.nodes:.2f} ms of CPU per second per node")
    if not rows:
        return
    table = Table(title=f"{args.nodes} nodes in one process, {args.size // 1000} KB batches")
    columns = ["round", "CPU ms", "us / delivery", "relay decision ms", "relay share"]
    if args.compare_read_ahead:
        columns.insert(1, "read-ahead")
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row["round"]),
            *(["on" if row["read_ahead"] else "off"] if args.compare_read_ahead else []),
            f"{1000 * row['cpu_s']:.0f}",
            f"{1e6 * row['cpu_s'] / row['deliveries']:.0f}",
            f"{1000 * row['relay_s']:.0f}",
            f"{row['relay_s'] / row['cpu_s']:.0%}",
        )
    Console().print(table)
    if args.compare_read_ahead:
        _print_read_ahead_ratio(rows, "deliveries", "delivery")
        return
    median = statistics.median(r["cpu_s"] / r["deliveries"] for r in rows)
    print(f"median: {1e6 * median:.0f} us of CPU per delivery")


STREAM_BLOCK = 250
STREAM_BURST = 5


def _print_stream(rows: list[dict[str, Any]]) -> None:
    table = Table(title="one node streaming to another (both in this process)")
    for column in ("block", "read-ahead", "messages", "us / message"):
        table.add_column(column, justify="right")
    for index, row in enumerate(rows):
        on = "on" if row["read_ahead"] else "off"
        table.add_row(str(index), on, str(row["messages"]), f"{1e6 * row['cpu_s'] / row['messages']:.0f}")
    Console().print(table)
    _print_read_ahead_ratio(rows, "messages", "message")


def _print_read_ahead_ratio(rows: list[dict[str, Any]], count_key: str, unit: str) -> None:
    """The median CPU per `unit` of the rows with read-ahead on and off, and their ratio."""
    on, off = (
        statistics.median(r["cpu_s"] / r[count_key] for r in rows if r["read_ahead"] is flag)
        for flag in (True, False)
    )
    print(
        f"median us of CPU per {unit}: read-ahead {1e6 * on:.0f}, without {1e6 * off:.0f}"
        f" (baseline), ratio {on / off:.2f}x"
    )


async def _stream(args: argparse.Namespace) -> list[dict[str, Any]]:
    from libp2p.crypto.ed25519 import create_new_key_pair

    from swarmp2p.net import NetworkSettings, gossip, open_libp2p_network

    read_ahead_bytes = gossip.READ_AHEAD_BYTES
    # The receiver takes this one origin's whole stream: its per-origin limit would drop most of it.
    unlimited = {"origin_rate_per_s": 1e9, "origin_burst": 1e9}
    rows: list[dict[str, Any]] = []
    async with AsyncExitStack() as stack:
        sender = await stack.enter_async_context(
            open_libp2p_network(create_new_key_pair(), NetworkSettings(**unlimited))  # type: ignore[arg-type]
        )
        receiver_settings = NetworkSettings(bootstrap=(sender.listen_addrs()[0],), **unlimited)  # type: ignore[arg-type]
        receiver = await stack.enter_async_context(
            open_libp2p_network(create_new_key_pair(), receiver_settings)
        )
        await sender.subscribe(TOPIC)
        channel = await receiver.subscribe(TOPIC)
        with trio.fail_after(60):
            while not receiver.connected_peers() or not sender.connected_peers():
                await trio.sleep(0.2)
        await trio.sleep(args.settle)
        gc.collect()
        gc.freeze()
        received = [0]
        wanted = [0]
        arrived = [trio.Event()]

        async def listen() -> None:
            async for _message in channel:
                received[0] += 1
                if received[0] >= wanted[0]:
                    arrived[0].set()

        payload = os.urandom(args.size)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen)
            sent = 0
            block = 0
            while sent < 2 * args.stream:
                read_ahead = block % 2 == 0
                gossip.READ_AHEAD_BYTES = read_ahead_bytes if read_ahead else 0
                started = time.process_time()
                for _ in range(STREAM_BLOCK // STREAM_BURST):
                    for _ in range(STREAM_BURST):
                        await sender.publish(TOPIC, msgpack.packb({"id": sent, "data": payload}))
                        sent += 1
                    wanted[0] = sent
                    with trio.fail_after(30):
                        if received[0] < sent:
                            await arrived[0].wait()
                    arrived[0] = trio.Event()
                rows.append(
                    {
                        "read_ahead": read_ahead,
                        "messages": STREAM_BLOCK,
                        "cpu_s": time.process_time() - started,
                    }
                )
                block += 1
            nursery.cancel_scope.cancel()
    gossip.READ_AHEAD_BYTES = read_ahead_bytes
    gc.unfreeze()
    return rows


async def _rounds(args: argparse.Namespace, idle: list[float]) -> list[dict[str, Any]]:
    from libp2p.crypto.ed25519 import create_new_key_pair

    from swarmp2p.net import NetworkSettings, gossip, open_libp2p_network

    read_ahead_bytes = gossip.READ_AHEAD_BYTES
    relay_s = [0.0]
    # The node's router class, whichever `publish` it resolves to (its own or py-libp2p's), so
    # that a run from an older checkout (PYTHONPATH) times the same call.
    router_class = gossip.CountingGossipSub
    original_publish = router_class.publish

    async def timed_publish(self: Any, *a: Any, **k: Any) -> None:
        # process_time across the call: it does not yield (send_rpc only queues).
        started = time.process_time()
        try:
            await original_publish(self, *a, **k)
        finally:
            relay_s[0] += time.process_time() - started

    router_class.publish = timed_publish  # type: ignore[method-assign]
    n = args.nodes
    rows: list[dict[str, Any]] = []
    async with AsyncExitStack() as stack:
        nets: list[Any] = []
        for _ in range(n):
            settings = NetworkSettings()
            if nets:
                settings = attrs.evolve(settings, bootstrap=(nets[0].listen_addrs()[0],))
            nets.append(await stack.enter_async_context(open_libp2p_network(create_new_key_pair(), settings)))
        channels = [await net.subscribe(TOPIC) for net in nets]
        with trio.fail_after(120):
            while min(len(net.connected_peers()) for net in nets) < n - 1:
                await trio.sleep(0.5)
        await trio.sleep(args.settle)
        # What the nodes built while joining is kept out of later collections: one full
        # collection of 20 nodes' heaps during a round moved its figure by ~100-200 ms.
        gc.collect()
        gc.freeze()
        if args.idle_s > 0:  # connected, subscribed, nothing published: heartbeats and upkeep
            started = time.process_time()
            await trio.sleep(args.idle_s)
            idle.append(time.process_time() - started)
        pending = [0]  # deliveries still to come this round
        all_here = trio.Event()

        async def listen(index: int) -> None:
            async for _message in channels[index]:
                pending[0] -= 1
                if pending[0] == 0:
                    all_here.set()

        async with trio.open_nursery() as nursery:
            for index in range(n):
                nursery.start_soon(listen, index)
            for round_number in range(args.rounds):
                await trio.sleep(3.0)  # the last round's IHAVEs and window updates settle
                # --compare-read-ahead: odd rounds without (`max(n, 0)` reads exactly n bytes).
                read_ahead = not (args.compare_read_ahead and round_number % 2)
                gossip.READ_AHEAD_BYTES = read_ahead_bytes if read_ahead else 0
                relay_s[0] = 0.0
                pending[0] = n * (n - 1)
                all_here = trio.Event()
                started = time.process_time()
                for index, net in enumerate(nets):
                    body = {"id": round_number * n + index, "data": os.urandom(args.size)}
                    await net.publish(TOPIC, msgpack.packb(body))
                with trio.fail_after(60):
                    await all_here.wait()
                cpu_s = time.process_time() - started
                rows.append(
                    {
                        "round": round_number,
                        "cpu_s": cpu_s,
                        "deliveries": n * (n - 1),
                        "relay_s": relay_s[0],
                        "read_ahead": read_ahead,
                    }
                )
            nursery.cancel_scope.cancel()
    router_class.publish = original_publish  # type: ignore[method-assign]
    gossip.READ_AHEAD_BYTES = read_ahead_bytes
    gc.unfreeze()
    return rows


if __name__ == "__main__":
    main()
