"""Attacks against two honest nodes, measured: rollouts lost, CPU and RSS.

Two honest Peers run in this process (netlab/attack_kit.py `run_pair`: the simulator's cheap
policy, real libp2p hosts on 127.0.0.1, the node's hellos and gossip checks, 4 s rounds); each
attack but the replay comes from a separate attacker process (`python -m netlab.attack_kit`),
as an outside host would. Per attack, in turn:

- before: 2 rounds of quiet; during: the attack; after: 3 more rounds of quiet.
- honest rollouts lost: rounds from the attack's start to the end of "after" in which a node
  did not get (fetch and verify) the other's batch; not trained on: rounds in which a node did
  not train on the other's rollouts (also when the sampler dropped them for zero advantage).
- CPU: this process's CPU time over wall time in each phase (100% = one core; both honest
  nodes share this process and its one trio thread); RSS: this process's resident set at the
  end of "before", its peak during the attack (sampled every 0.25 s) and at the end of "after".
- whether RSS after is within 50 MB of RSS before.
- `/api/status` and `/metrics` latency: node 0's dashboard asked one request at a time from a
  client thread, p99 over the quiet rounds before the attack and over the attack (the bar:
  100 ms). `--dashboard thread` (default) serves it as `swarmp2p node` does: status snapshots
  published from the peers' trio thread, answered from a server thread of its own
  (swarmp2p/dashboard/snapshot.py); `--dashboard loop` serves it on the peers' trio thread,
  each request building its status there (for comparison).

    python bench/bench_attack.py                      # flood 60 s, 300 sybils 60 s, DHT 30 s, replay
    python bench/bench_attack.py --flood-s 20 --sybil-s 20 --dht-s 10

Run it with PYTHONPATH at the repository root (it imports netlab/attack_kit.py).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
import urllib.request
from typing import Any

import trio
from procfs import rss_mib

from netlab.attack_kit import FAST, Pair, hello_replay, run_attacker, run_pair, wait_rounds
from swarmp2p import memory

MB = 1024 * 1024


def rss_bytes() -> int:
    return int(rss_mib() * MB)


class Phase:
    """CPU share and wall time of one phase of this process."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.monotonic(), time.process_time()

    def cpu_percent(self) -> float:
        wall = time.monotonic() - self.wall
        return 100.0 * (time.process_time() - self.cpu) / wall if wall > 0 else 0.0


class Latency:
    """Seconds per answered GET of each dashboard path, by phase (one request at a time, from a
    client thread)."""

    PATHS = ("/api/status", "/metrics")

    def __init__(self, port: int) -> None:
        self.port = port
        self.phase = "quiet"
        self.seconds: dict[tuple[str, str], list[float]] = {}

    def _get(self, path: str) -> float:
        started = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as answer:
            answer.read()
        return time.monotonic() - started

    async def sample(self) -> None:
        while True:
            for path in self.PATHS:
                phase = self.phase
                try:
                    took = await trio.to_thread.run_sync(self._get, path)
                except OSError:
                    took = float("inf")  # no answer within 30 s counts as the slowest
                self.seconds.setdefault((phase, path), []).append(took)
            await trio.sleep(0.05)

    def take(self) -> dict[tuple[str, str], list[float]]:
        taken, self.seconds = self.seconds, {}
        return taken


def p99_ms(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


LATENCY: list[Latency] = []  # the dashboard's sampler, once it serves


async def serve_node_dashboard(nursery: trio.Nursery, source: Any, mode: str) -> int:
    """Node 0's dashboard in `nursery`, served as `mode` says (see the module's doc); its port."""
    if mode == "loop":
        from swarmp2p.dashboard import serve_dashboard

        return int(await nursery.start(serve_dashboard, source))
    from swarmp2p.dashboard.snapshot import StatusPublisher
    from swarmp2p.dashboard.thread_server import serve_dashboard_in_thread

    publisher = StatusPublisher(source)
    await nursery.start(publisher.run)
    return int(await nursery.start(serve_dashboard_in_thread, publisher.status))


async def measure(pair: Pair, name: str, run: Any, rows: list[dict[str, Any]]) -> None:
    """One attack: quiet, the attack (run(pair) -> report), quiet; one row of the table."""
    await wait_rounds(pair, 2)
    before_cpu = Phase()
    for latency in LATENCY:
        latency.take()
        latency.phase = "quiet"
    await wait_rounds(pair, 2)
    for latency in LATENCY:
        latency.phase = "attack"
    row: dict[str, Any] = {"attack": name, "cpu_before": before_cpu.cpu_percent(), "rss_before": rss_bytes()}
    first_round = max(max(book, default=0) for book in pair.records) + 1
    peak = [rss_bytes()]

    async def sample() -> None:
        while True:
            peak[0] = max(peak[0], rss_bytes())
            await trio.sleep(0.25)

    during = Phase()
    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample)
        row["report"] = await run(pair)
        nursery.cancel_scope.cancel()
    row["seconds"] = time.monotonic() - started
    row["cpu_during"], row["rss_peak"] = during.cpu_percent(), peak[0]
    for latency in LATENCY:
        taken = latency.take()
        row["latency_p99_ms"] = {
            f"{phase} {path}": p99_ms(taken.get((phase, path), []))
            for phase in ("quiet", "attack")
            for path in Latency.PATHS
        }
        row["latency_samples"] = {f"{phase} {path}": len(v) for (phase, path), v in taken.items()}
        latency.phase = "after"
    after = Phase()
    await wait_rounds(pair, 3)
    row["cpu_after"], row["rss_after"] = after.cpu_percent(), rss_bytes()
    trained = {r: t for r, t in pair.trained().items() if r >= first_round}
    row["rounds"] = len(trained)
    row["lost"] = [r for r in pair.rounds_lost() if r >= first_round]
    row["not_trained"] = [r for r in pair.rounds_not_trained() if r >= first_round]
    rows.append(row)
    print(f"{name}: {row}", file=sys.stderr, flush=True)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| attack | attack s | attacker sent | rounds lost / not trained on / rounds "
        "| CPU % before / during / after "
        "| RSS MB before / peak / after | RSS back within 50 MB "
        "| /api/status p99 ms quiet / attack | /metrics p99 ms quiet / attack |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        report = row["report"]
        sent = report.get("messages", report.get("puts", report.get("sent", "?")))
        back = abs(row["rss_after"] - row["rss_before"]) <= 50 * MB
        lines.append(
            f"| {row['attack']} | {row['seconds']:.0f} | {sent} "
            f"| {len(row['lost'])} / {len(row['not_trained'])} / {row['rounds']} "
            f"| {row['cpu_before']:.0f} / {row['cpu_during']:.0f} / {row['cpu_after']:.0f} "
            f"| {row['rss_before'] / MB:.0f} / {row['rss_peak'] / MB:.0f} / {row['rss_after'] / MB:.0f} "
            f"| {'yes' if back else 'no'} ({(row['rss_after'] - row['rss_before']) / MB:+.0f}) "
            f"| {latency_cell(row, '/api/status')} | {latency_cell(row, '/metrics')} |"
        )
    return "\n".join(lines)


def latency_cell(row: dict[str, Any], path: str) -> str:
    p99 = row.get("latency_p99_ms")
    if not p99:
        return "-"
    return f"{p99[f'quiet {path}']:.0f} / {p99[f'attack {path}']:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flood-s", type=float, default=60.0)
    parser.add_argument("--flood-keys", type=int, default=1000)
    parser.add_argument("--sybil-s", type=float, default=60.0)
    parser.add_argument("--sybils", type=int, default=300)
    parser.add_argument("--dht-s", type=float, default=30.0)
    parser.add_argument("--dht-keys", type=int, default=200)
    parser.add_argument(
        "--no-memory-config",
        action="store_true",
        help="leave glibc's dynamic mmap threshold on and free heap pages kept, as before "
        "swarmp2p/memory.py (swarmp2p node fixes the threshold and gives free pages back every 5 s)",
    )
    parser.add_argument(
        "--dashboard",
        choices=("thread", "loop"),
        default="thread",
        help="thread: snapshots served from a server thread, as swarmp2p node does; loop: the "
        "server on the peers' trio thread, each request's status built there",
    )
    args = parser.parse_args()
    if not args.no_memory_config:
        print(f"mmap threshold fixed as swarmp2p node does: {memory.configure()}", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()

    def attacker(mode: str, seconds: float, keys: int) -> Any:
        async def run(pair: Pair) -> dict[str, Any]:
            return await run_attacker(pair.attacker_args(mode, seconds, keys), seconds)

        return run

    async def replay(pair: Pair) -> dict[str, Any]:
        # Default seen-cache (65,536 ids): the recorded hellos are deduplicated there; the 50
        # hellos of throwaway keys signed 3 rounds earlier meet the freshness check.
        return await hello_replay(pair, FAST, junk=0)

    async def attacks(pair: Pair) -> None:
        async with trio.open_nursery() as upkeep:
            if not args.no_memory_config:  # what swarmp2p node runs beside its peer
                upkeep.start_soon(memory.give_back_periodically)
            port = await serve_node_dashboard(upkeep, functools.partial(pair.status, 0), args.dashboard)
            LATENCY.append(Latency(port))
            upkeep.start_soon(LATENCY[0].sample)
            await run_attacks(pair)
            upkeep.cancel_scope.cancel()

    async def run_attacks(pair: Pair) -> None:
        await measure(
            pair,
            f"gossip flood ({args.flood_keys} keys + 1, max rate)",
            attacker("flood", args.flood_s, args.flood_keys),
            rows,
        )
        await measure(
            pair, f"{args.sybils} next-round sybils", attacker("sybils", args.sybil_s, args.sybils), rows
        )
        await measure(
            pair, f"DHT abuse ({args.dht_keys} keys + 1)", attacker("dht", args.dht_s, args.dht_keys), rows
        )
        await measure(pair, "hello replay (3 recorded + 50 old)", replay, rows)

    started = time.monotonic()
    pair = run_pair(attacks)
    load_after = os.getloadavg()
    print(table(rows))
    served = "a thread of its own" if args.dashboard == "thread" else "the peers' trio thread"
    print(f"dashboard: served on {served}")
    print()
    before, after = (f"{load[0]:.2f} / {load[1]:.2f}" for load in (load_before, load_after))
    print(f"wall {time.monotonic() - started:.0f} s; load average before {before}, after {after} (1 / 5 min)")
    for row in rows:
        print(f"{row['attack']}: attacker {row['report']}")
    for index, book in enumerate(pair.records):  # why a round was lost, as the node saw it
        lost = sorted({r for row in rows for r in row["lost"] + row["not_trained"]})
        for r in lost:
            if r in book:
                rec = book[r]
                print(
                    f"node {index} round {r}: accepted {len(rec.accepted_peers)}, trained on "
                    f"{len(rec.external_peers_trained_on)}, rejected {dict(rec.rejected)}, "
                    f"not trained on {sorted(set(rec.untrained_batches.values()))}"
                )
    for index, status in enumerate(pair.snapshots):
        drops = {k: v for k, v in status["network"]["drops"].items() if v}
        print(f"node {index}: drops {drops}")
        print(f"node {index}: rejections {status['rejections']}, hellos {status['hellos']}")
        print(f"node {index}: tables {status['network']['tables']}")


if __name__ == "__main__":
    main()
