"""The round exchange with no protocol at all: the floor any stack over TCP stands on.

Every process keeps one plain TCP connection to every other (as libp2p keeps one per peer) and,
at each round's scheduled start, writes its whole batch on all of them at once: no announcement,
no request, no framing, no encryption. A round's time-to-all is when the last process has the
last byte of the last batch, from the round's start; p50 and p99 are over rounds, as
bench_network.py's all-to-all rows are. The sockets get the node's own loss-recovery options
(`NetworkSettings.tcp_rto_min_ms` / `tcp_delack_max_ms`, where the kernel has them), so the
floor is what TCP itself can do on the same path, not what Linux's defaults do.

What it shows (docs/benchmarks.md): on the harness's 100 ms RTT, 1% loss namespaces, a
first 1 MB round on new connections pays TCP's slow start (~7 RTT for 1 MB) and later rounds
pay its loss recovery, before any protocol adds a byte.

    python bench/bench_network.py --all-to-all --netns --vs-loopback --tcp-floor ...   # as columns
    PYTHONPATH=. python bench/tcp_floor.py --procs 5 --sizes 1000000 --rounds 5 --netns   # alone
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from swarmp2p.net.tcp_recovery import shorten_loss_recovery

if TYPE_CHECKING:
    from netlab.netns_harness import NetnsNetwork

PORT = 9100
CONNECT_WAIT_S = 20.0
READY_MARGIN_S = 2.0  # from the last process connected to the first round's start


def _tune(sock: socket.socket, rto_min_ms: float, delack_max_ms: float) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if rto_min_ms:
        shorten_loss_recovery(sock, rto_min_ms, delack_max_ms)


def _connect_all(index: int, hosts: list[str], tune: dict[str, float]) -> dict[int, socket.socket]:
    """One connection per pair: the lower index dials, the higher accepts (and is told who)."""
    server = socket.create_server((hosts[index], PORT), backlog=len(hosts))
    conns: dict[int, socket.socket] = {}

    def accept() -> None:
        for _ in range(index):
            conn, _ = server.accept()
            conns[conn.recv(1)[0]] = conn

    acceptor = threading.Thread(target=accept)
    acceptor.start()
    for peer in range(index + 1, len(hosts)):
        deadline = time.monotonic() + CONNECT_WAIT_S
        while True:
            try:
                conn = socket.create_connection((hosts[peer], PORT), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        conn.sendall(bytes([index]))
        conns[peer] = conn
    acceptor.join()
    server.close()
    for conn in conns.values():
        conn.settimeout(None)
        _tune(conn, **tune)
    return conns


def worker(
    index: int, hosts: list[str], sizes: list[int], rounds: int, interval: float, tune: dict[str, float]
) -> None:
    """One process: connect, say ready (a line), read the start time (a line), then push and
    receive every round; prints {round: [arrival times of each peer's batch]} as JSON."""
    conns = _connect_all(index, hosts, tune)
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    plan = [size for size in sizes for _ in range(rounds)]
    arrivals: dict[int, list[float]] = {r: [] for r in range(len(plan))}
    lock = threading.Lock()

    def receive(conn: socket.socket) -> None:
        for r, size in enumerate(plan):
            need = size
            while need:
                chunk = conn.recv(min(need, 1 << 20))
                if not chunk:
                    return
                need -= len(chunk)
            with lock:
                arrivals[r].append(time.time())

    readers = [threading.Thread(target=receive, args=(conn,), daemon=True) for conn in conns.values()]
    for reader in readers:
        reader.start()
    payloads = {size: bytes(size) for size in sizes}
    for r, size in enumerate(plan):
        time.sleep(max(0.0, start + r * interval - time.time()))
        for conn in conns.values():  # every connection at once, as a round's fetches are
            threading.Thread(target=conn.sendall, args=(payloads[size],), daemon=True).start()
    for reader in readers:
        reader.join(timeout=interval + 30)
    print(json.dumps({"arrivals": arrivals, "peers": len(conns)}), flush=True)


def run_floor(
    procs: int,
    sizes: list[int],
    rounds: int,
    interval: float,
    *,
    network: NetnsNetwork | None = None,
    rto_min_ms: float = 50.0,
    delack_max_ms: float = 20.0,
) -> dict[int, dict[str, Any]]:
    """Run the exchange on loopback (127.0.0.i) or in `network`'s namespaces (one process each);
    per size: p50 / p99 over rounds of the time-to-all, every round's figure, and lost batches."""
    from trainer.percentile import percentile  # the rule of every figure, our rows' too

    if network is not None:
        from netlab.netns_harness import address

        hosts = [address(i) for i in range(procs)]
    else:
        hosts = [f"127.0.0.{i + 1}" for i in range(procs)]
    command = [
        sys.executable, __file__, "--worker", "--hosts", ",".join(hosts),
        "--sizes", ",".join(map(str, sizes)), "--rounds", str(rounds), "--interval", str(interval),
        "--rto-min-ms", str(rto_min_ms), "--delack-max-ms", str(delack_max_ms),
    ]  # fmt: skip
    place = network.exec_args if network is not None else lambda i: []
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    workers = [subprocess.Popen([*place(i), *command, "--index", str(i)], **pipes) for i in range(procs)]
    try:
        for w in workers:
            assert w.stdout is not None
            if w.stdout.readline().strip() != "ready":
                raise SystemExit("tcp floor: a worker did not connect to the others")
        start = time.time() + READY_MARGIN_S
        for w in workers:  # every worker learns the start before any is waited for
            assert w.stdin is not None
            w.stdin.write(f"{start}\n")
            w.stdin.flush()
        limit = len(sizes) * rounds * interval + 90
        outputs = [json.loads(w.communicate(timeout=limit)[0]) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    rows: dict[int, dict[str, Any]] = {}
    for s_index, size in enumerate(sizes):
        took: list[float] = []
        lost = 0
        for r in range(s_index * rounds, (s_index + 1) * rounds):
            times = [t for out in outputs for t in out["arrivals"][str(r)]]
            lost += procs * (procs - 1) - len(times)
            scheduled = start + r * interval
            took.append(max(times) - scheduled if len(times) == procs * (procs - 1) else float("inf"))
        rows[size] = {
            "p50": statistics.median(took),
            "p99": percentile(sorted(took), 0.99),
            "rounds": took,
            "lost": lost,
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--procs", type=int, default=5)
    parser.add_argument("--sizes", default="10000,1000000")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per batch size")
    parser.add_argument("--interval", type=float, default=8.0)
    parser.add_argument("--netns", action="store_true", help="each process in its own namespace (root)")
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--loss", type=float, default=0.01)
    parser.add_argument("--rto-min-ms", type=float, default=50.0, help="0: Linux's defaults")
    parser.add_argument("--delack-max-ms", type=float, default=20.0)
    parser.add_argument(
        "--switch-per-packet",
        action="store_true",
        help="--netns: the harness's switch without segmentation offload (one 1500-byte packet a read)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--hosts", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    tune = {"rto_min_ms": args.rto_min_ms, "delack_max_ms": args.delack_max_ms}
    if args.worker:
        worker(args.index, args.hosts.split(","), sizes, args.rounds, args.interval, tune)
        return
    if args.netns:
        from netlab.netns_harness import NetnsNetwork

        with NetnsNetwork(args.procs, offload=not args.switch_per_packet) as network:
            network.impair(delay_ms=args.delay_ms, jitter_ms=args.jitter_ms, loss=args.loss)
            rows = run_floor(args.procs, sizes, args.rounds, args.interval, network=network, **tune)
            stats = network.stats()
    else:
        rows = run_floor(args.procs, sizes, args.rounds, args.interval, **tune)
        stats = []
    where = (
        f"namespaces, {args.delay_ms:g} ± {args.jitter_ms:g} ms one-way, {args.loss:g} loss"
        if args.netns
        else "loopback"
    )
    print(f"plain TCP all-to-all, {args.procs} processes, {where}")
    print("| batch | p50 s | p99 s | every round s | lost |\n|---|---|---|---|---|")
    for size, row in rows.items():
        every = ", ".join(f"{t:.3f}" for t in row["rounds"])
        print(f"| {size / 1000:g} KB | {row['p50']:.3f} | {row['p99']:.3f} | {every} | {row['lost']} |")
    if stats:
        # What the switch carried: segments on the 1500-byte wire, and the packets it wrote
        # (fewer with offload), and how many it delivered more than 1 ms late.
        total = {
            key: sum(node.get(key, 0) for node in stats) for key in ("forwarded", "packets", "late_over_1ms")
        }
        offload = "per packet" if args.switch_per_packet else "offloaded"
        print(
            f"switch ({offload}): {total['forwarded']} segments in {total['packets']} packets, "
            f"{total['late_over_1ms']} more than 1 ms late"
        )


if __name__ == "__main__":
    main()
