"""Round-exchange latency of the libp2p adapter across real OS processes on 127.0.0.1, or each
in its own network namespace behind a delaying, lossy switch (`--netns`).

Over 600 lines: the swarm run, its netns variant and the CLI share run_config's files and flags.
The worker process and the figures are apart: network_worker.py, network_report.py.

One exchange = what a swarm round does: the publisher gossips a small announcement and serves
its batch over /swarmp2p/fetch/1.0.0; every other process fetches the batch on hearing the
announcement. As in the node, a batch up to `push_max_bytes` (NetworkSettings, 64 KiB; set with
`--push-max-bytes`, 0 = never) rides inside the announcement instead and nobody fetches it
(swarmp2p/pushed.py). Each process runs at most `--fetch-concurrency` fetches at once (the
node's fetch workers, 8) and queues the rest. Latency = from publish until the LAST process
holds the batch. Reported per
(processes, batch size): p50 / p99 of that latency; gossip p99 (until the last process HEARD the
announcement, the gossip share of the latency); batches lost (not fetched 30 s after the last
publish); failed fetch attempts (retried up to 3 times; reasons printed under the table); CPU
seconds per process during the exchange phase; and the machine's load average around each
configuration (on a shared machine other work competes with the processes measured). Also idle
CPU: seconds per process over `--idle` seconds of a connected swarm doing nothing (py-libp2p's
own upkeep: heartbeats, pings, its AutoConnector). Ratios are against the first configuration
measured in this run.

`--conn-manager` picks py-libp2p's connection manager: `swarm` (the NetworkSettings defaults:
our ConnectionConfig, AutoConnector on), `libp2p-default` (no ConnectionConfig: py-libp2p 0.8.1's
defaults, AutoConnector on), or `both` (each process count run with the default first, as the
baseline, then ours).

    python bench/bench_network.py                      # 5, 10, 20 processes x 10 KB, 200 KB, 1 MB
    python bench/bench_network.py --procs 5 --sizes 10000 --messages 20
    python bench/bench_network.py --procs 5,20 --sizes 10000 --conn-manager both
    python bench/bench_network.py --all-to-all --procs 20 --interval 8   # every process publishes per round

`--netns` (root, iproute2, /dev/net/tun; the repository root on PYTHONPATH, for `netlab`) runs
every worker in its own network namespace, joined by netlab/netns_harness.py's userspace switch
(the kernel has no sch_netem) with `--delay-ms` ± `--jitter-ms` one-way and `--loss` on every
node's egress: 50 ms each way is 100 ms RTT.
`--vs-loopback` runs each process count on 127.0.0.1 and then on the namespaces, back to back,
and prints one markdown table: p99 on the namespaces minus p99 on loopback, in RTTs.
`--host-tcp initcwnd=N,no-idle-restart` tunes the namespaces' own TCP (never the machine's): the
initial windows on their routes, and no slow start after idle (docs/benchmarks.md).
`--tcp-floor` adds the same exchange as a bare TCP push (bench/tcp_floor.py) on both networks,
as columns: what TCP alone costs on the path, under any protocol.
Processes say ready once connected and, where relays skip the author's neighbours, once their
relays have settled (network_worker.py `wait_for_relays`); both count in the start-up time.

    python bench/bench_network.py --all-to-all --netns --vs-loopback --procs 5,10 --sizes 10000,1000000 \
        --messages 5 --interval 6 --idle 0 --delay-ms 50 --loss 0.01

Targets: p99 < 0.5 s at 20 processes with 10 KB batches; 1 MB batches with nothing lost.
Target: with 100 ms RTT and 1% loss, p99 time-to-all within 4 RTT of loopback's.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import procfs
from network_report import compare_table, per_round, ratio, round_table, summarize
from network_worker import (
    FETCH_SLOTS_ENV,
    MESH_ENV,
    PUSH_ENV,
    RELAY_ALL_ENV,
    RELAY_BACKUP_ENV,
    worker,
    write_atomically,
)

if TYPE_CHECKING:
    from netlab.netns_harness import NetnsNetwork


# ---- orchestration --------------------------------------------------------------------------


def run_config(
    procs: int,
    sizes: list[int],
    messages: int,
    interval: float,
    conn_manager: str,
    idle_s: float,
    *,
    all_to_all: bool = False,
    command: list[str] | None = None,
    grace_s: float = 30.0,
    netns: NetnsNetwork | None = None,
) -> dict[int, dict[str, Any]]:
    """Run one swarm of `procs` worker processes and summarize it per batch size.

    `command` is the worker's command line without arguments (default: this script's worker
    on our adapter); bench_hivemind.py passes its hivemind worker, which speaks the same file
    protocol in `out`: `addr` from the first process, `ready-i`, then `start` (a wall-clock
    time) from here, `done-i` and `result-i.json` from each worker.

    With `netns` (at least `procs` namespaces, already impaired) worker i runs in namespace i
    and listens on its address; the others bootstrap to worker 0's, so every byte between
    workers crosses the switch. The files in `out` and the wall clock are shared with the host.
    """
    with tempfile.TemporaryDirectory(prefix="bench-net-") as tmp:
        out = Path(tmp)
        base = [*(command or [sys.executable, __file__, "--worker"]), "--out", tmp, "--procs", str(procs)]
        base += [
            "--sizes",
            ",".join(map(str, sizes)),
            "--messages",
            str(messages),
            "--interval",
            str(interval),
            "--conn-manager",
            conn_manager,
        ]
        if all_to_all:
            base.append("--all-to-all")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        launched = time.time()

        # Each worker's stderr goes to a file: a crash's last line is reported as its reason.
        def launch(i: int, extra: list[str]) -> subprocess.Popen[bytes]:
            # `ip netns exec` execs the worker in place: the pid is the worker's own, so the
            # memory sampling and the kill below reach it as on loopback.
            place = netns.exec_args(i) if netns else []
            host = ["--host", load_harness().address(i)] if netns else []
            with open(out / f"stderr-{i}", "wb") as stderr:
                return subprocess.Popen(
                    [*place, *base, "--index", str(i), *host, *extra], env=env, stderr=stderr
                )

        workers = [launch(0, [])]
        memory = MemorySampler()
        try:
            wait(lambda: (out / "addr").exists(), 120, "the first process", workers, memory)
            addr = (out / "addr").read_text()
            for i in range(1, procs):
                workers.append(launch(i, ["--bootstrap", addr]))
            ready = lambda: all((out / f"ready-{i}").exists() for i in range(procs))  # noqa: E731
            wait(ready, 60 + 10 * procs, "the swarm to be ready", workers, memory)
            # Start-up: from launching the first process until every one is connected, with its
            # relays settled (wait_for_relays), and ready.
            startup_s = time.time() - launched
            start = time.time() + 2.0 + idle_s
            write_atomically(out / "start", str(start))
            deadline = time.monotonic() + 60 + grace_s + len(sizes) * messages * interval
            while any(process.poll() is None for process in workers) and time.monotonic() < deadline:
                memory.sample(workers)
                time.sleep(0.5)
            # A worker that crashed or hung leaves no result: its peer is reported as crashed
            # and every batch it should have received as lost, not the whole configuration.
            results: list[dict[str, Any] | None] = []
            crashes: dict[str, int] = {}
            for i in range(procs):
                path = out / f"result-{i}.json"
                results.append(json.loads(path.read_text()) if path.exists() else None)
                if results[-1] is None or not results[-1].get("finished", True):
                    reason = crash_reason(out / f"stderr-{i}") or f"exit code {workers[i].poll()}"
                    crashes[reason] = crashes.get(reason, 0) + 1
        finally:
            for process in workers:
                if process.poll() is None:
                    process.kill()
    windows = [start + k * messages * interval for k in range(1, len(sizes))]
    rows = summarize(results, sizes, messages, start, interval, all_to_all=all_to_all, idle_s=idle_s)
    rounds = per_round(results, len(sizes) * messages, start, interval, all_to_all=all_to_all)
    peaks = memory.peaks(windows)
    for s_index, row in enumerate(rows.values()):
        row["startup_s"] = startup_s
        row["crash_reasons"] = crashes
        row["peak_mib"] = statistics.mean(peaks[s_index]) if peaks[s_index] else float("nan")
        row["rounds"] = rounds[s_index * messages : (s_index + 1) * messages]
    return rows


def crash_reason(path: Path) -> str:
    """The distinct exception lines of a worker's stderr (the first is usually the cause),
    then its last line."""
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    found = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b.*", line)]
    if lines and lines[-1] not in found:
        found.append(lines[-1])
    found = list(dict.fromkeys(re.sub(r"12D3Koo\w+", "<peer>", line)[:160] for line in found))
    return " / ".join(found)


class MemorySampler:
    """Peak proportional set size (PSS) of each worker's process tree, per time window.

    Sampled from /proc here rather than reported by the workers: a hivemind peer is three
    processes (the worker, its forked DHT process, the Go p2pd daemon), and forked processes
    share pages, so PSS summed over the tree is its memory without counting shared pages twice.
    """

    def __init__(self) -> None:
        self.samples: list[tuple[float, list[float]]] = []

    def sample(self, workers: list[subprocess.Popen[bytes]]) -> None:
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
        self.samples.append((time.time(), [tree_pss_mib(w.pid, children) for w in workers]))

    def peaks(self, boundaries: list[float]) -> list[list[float]]:
        """Per window (split at `boundaries`), each worker's peak; earlier samples go to window 0."""
        peaks: list[list[float]] = [[] for _ in range(len(boundaries) + 1)]
        for t, values in self.samples:
            window = sum(1 for b in boundaries if t >= b)
            row = peaks[window]
            for i, value in enumerate(values):
                if i < len(row):
                    row[i] = max(row[i], value)
                else:
                    row.append(value)
        return peaks


def tree_pss_mib(root: int, children: dict[int, list[int]]) -> float:
    total_kib, stack = 0, [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total_kib += int(line.split()[1])
                    break
        except OSError:
            continue  # exited between the listing and the read
    return total_kib / 1024


def wait(  # type: ignore[no-untyped-def]
    predicate,
    timeout_s: float,
    what: str,
    workers: list[subprocess.Popen[bytes]] | None = None,
    memory: MemorySampler | None = None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        if workers and all(process.poll() is not None for process in workers):
            raise SystemExit(f"every process exited while waiting for {what}")
        if memory is not None and workers is not None:
            memory.sample(workers)
        time.sleep(0.1 if memory is None else 0.5)


# ---- the namespace network (--netns) --------------------------------------------------------


def load_harness() -> ModuleType:
    """netlab/netns_harness.py, imported rather than copied: the namespaces, the switch and their
    teardown are the ones the netns tests use (the repository root on PYTHONPATH)."""
    from netlab import netns_harness

    return netns_harness


def run_netns_config(
    procs: int,
    sizes: list[int],
    messages: int,
    interval: float,
    conn_manager: str,
    idle_s: float,
    *,
    delay_ms: float,
    jitter_ms: float,
    loss: float,
    host_tcp: str = "",
    all_to_all: bool = False,
    command: list[str] | None = None,
    grace_s: float = 30.0,
) -> dict[int, dict[str, Any]]:
    """run_config with every worker in its own namespace and `delay_ms` ± `jitter_ms`, `loss` on
    every node's egress, and the namespaces' TCP tuned as `host_tcp` says (host_tcp_options).
    Each row also gets the switch's counters summed over nodes (`switch`)
    and the switch process's CPU seconds (`switch_cpu_s`: it forwards every packet in Python,
    so on a loaded machine it is part of the latency measured)."""
    harness = load_harness()
    # The context manager deletes the namespaces (and whatever still runs in them) on any exit.
    with harness.NetnsNetwork(procs) as network:
        network.impair(delay_ms=delay_ms, jitter_ms=jitter_ms, loss=loss)
        network.tune_tcp(**host_tcp_options(host_tcp))
        assert network.switch is not None
        switch_cpu = procfs.cpu_seconds(network.switch.pid) or 0.0
        rows = run_config(
            procs, sizes, messages, interval, conn_manager, idle_s,
            all_to_all=all_to_all, command=command, grace_s=grace_s, netns=network,
        )  # fmt: skip
        switch_cpu = (procfs.cpu_seconds(network.switch.pid) or 0.0) - switch_cpu
        totals = switch_totals(network.stats())
        scheduling = network.switch_scheduling
    for row in rows.values():
        row["switch"] = totals
        row["switch_cpu_s"] = switch_cpu
        row["switch_scheduling"] = scheduling
    return rows


def run_on_network(
    network: str,
    procs: int,
    sizes: list[int],
    messages: int,
    interval: float,
    conn_manager: str,
    idle_s: float,
    *,
    impairment: dict[str, float],
    **options: Any,
) -> dict[int, dict[str, Any]]:
    """run_config on "loopback", run_netns_config on "netns" with `impairment` (its delay_ms,
    jitter_ms and loss); `options` go to either (all_to_all, command, grace_s)."""
    if network == "netns":
        return run_netns_config(
            procs, sizes, messages, interval, conn_manager, idle_s, **impairment, **options
        )  # fmt: skip
    return run_config(procs, sizes, messages, interval, conn_manager, idle_s, **options)


def impairment_of(args: argparse.Namespace) -> dict[str, Any]:
    """The namespaces' impairment from the command line's --delay-ms, --jitter-ms and --loss,
    and their hosts' TCP settings (--host-tcp)."""
    return {
        "delay_ms": args.delay_ms,
        "jitter_ms": args.jitter_ms,
        "loss": args.loss,
        "host_tcp": args.host_tcp,
    }


def host_tcp_options(spec: str) -> dict[str, Any]:
    """--host-tcp's comma-separated settings as NetnsNetwork.tune_tcp's arguments:
    `initcwnd=N` and `no-idle-restart`; "" leaves the namespaces at Linux's defaults."""
    options: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, value = part.partition("=")
        if name == "initcwnd" and value.isdigit() and 0 < int(value) <= 1000:
            options["initcwnd"] = int(value)
        elif name == "no-idle-restart" and not value:
            options["restart_after_idle"] = False
        else:
            raise SystemExit(f"--host-tcp: {part!r} is not initcwnd=N (1-1000) or no-idle-restart")
    return options


def switch_totals(per_node: list[dict[str, int]]) -> dict[str, int]:
    """The switch's counters over all nodes: counts summed, `*_max_us` the largest."""
    totals: dict[str, int] = {}
    for node in per_node:
        for key, value in node.items():
            merged = max if key.endswith("_max_us") else operator.add
            totals[key] = merged(totals.get(key, 0), value)
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--procs", default="5,10,20")
    parser.add_argument("--sizes", default="10000,200000,1000000")
    parser.add_argument("--messages", type=int, default=20, help="exchanges per batch size")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between exchanges")
    parser.add_argument(
        "--conn-manager",
        choices=("swarm", "libp2p-default", "both"),
        default="swarm",
        help="py-libp2p connection manager: ours, py-libp2p's defaults, or both (default first)",
    )
    parser.add_argument("--idle", type=float, default=10.0, help="idle seconds measured before the exchanges")
    parser.add_argument(
        "--all-to-all",
        action="store_true",
        help="every process publishes in every exchange (a swarm round); latency until all hold all",
    )
    parser.add_argument(
        "--netns",
        action="store_true",
        help="each worker in its own network namespace behind the harness's switch (root)",
    )
    parser.add_argument("--delay-ms", type=float, default=50.0, help="--netns: one-way delay per node")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="--netns: ± uniform jitter per packet")
    parser.add_argument(
        "--loss", type=float, default=0.01, help="--netns: packet loss on every node's egress"
    )
    parser.add_argument(
        "--host-tcp",
        default="",
        help="--netns: TCP settings of the namespaces' hosts, comma-separated: initcwnd=N (initial "
        "congestion and receive window, segments) and no-idle-restart (tcp_slow_start_after_idle=0); "
        "default: Linux's (10 segments, restart after idle)",
    )
    parser.add_argument(
        "--vs-loopback",
        action="store_true",
        help="with --netns: run each process count on loopback, then on the namespaces; one table",
    )
    parser.add_argument("--within-rtts", type=float, default=4.0, help="--vs-loopback: the target, in RTTs")
    parser.add_argument(
        "--tcp-floor",
        action="store_true",
        help="--vs-loopback: also run the same exchange as a bare TCP push (bench/tcp_floor.py) on both "
        "networks: the floor under any stack over TCP, as columns",
    )
    parser.add_argument("--json", default="", help="--vs-loopback: also write the rows here")
    parser.add_argument(
        "--push-max-bytes",
        type=int,
        default=None,
        help="batches up to this size ride in their announcement, as the node pushes them "
        "(default: the node's NetworkSettings.push_max_bytes; 0: every batch is fetched)",
    )
    parser.add_argument(
        "--fetch-concurrency",
        type=int,
        default=0,
        help="fetches in flight per process (default: the node's PeerSettings.fetch_concurrency, 8)",
    )
    parser.add_argument(
        "--mesh-degree",
        default="",
        help="gossip mesh degrees D,LOW,HIGH for every process (default: the node's NetworkSettings)",
    )
    parser.add_argument(
        "--relay-all",
        action="store_true",
        help="relays forward to every mesh peer, also those connected to the author "
        "(NetworkSettings.skip_relay_to_origin_neighbours off): second copies, at their CPU",
    )
    parser.add_argument(
        "--relay-backup",
        action="store_true",
        help="relays still skip peers connected to the author, but one picked relay sends each "
        "such peer one copy (NetworkSettings.relay_backup_copy): a second path on a lossy network",
    )
    parser.add_argument(
        "--per-round",
        action="store_true",
        help="also print each exchange: when half and 90%% of its deliveries had arrived and the "
        "last one did, the duplicates received and the CPU spent by all processes, and their connections",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", default="", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    host_tcp_options(args.host_tcp)  # a wrong --host-tcp says so before any namespace is made
    if args.push_max_bytes is not None:
        os.environ[PUSH_ENV] = str(args.push_max_bytes)  # every worker inherits it
    if args.fetch_concurrency:
        os.environ[FETCH_SLOTS_ENV] = str(args.fetch_concurrency)
    if args.relay_all:
        os.environ[RELAY_ALL_ENV] = "1"
    if args.relay_backup:
        os.environ[RELAY_BACKUP_ENV] = "1"
    if args.mesh_degree:
        parts = args.mesh_degree.split(",")
        if len(parts) != 3 or not all(part.strip().isdigit() for part in parts):
            parser.error(f"--mesh-degree takes D,LOW,HIGH (three whole numbers), not {args.mesh_degree!r}")
        os.environ[MESH_ENV] = args.mesh_degree
    if args.worker:
        args.procs = int(args.procs)
        worker(args)
        return
    if args.vs_loopback and not args.netns:
        parser.error("--vs-loopback compares with --netns: give both")
    if args.vs_loopback and args.conn_manager == "both":
        parser.error("--vs-loopback runs one connection manager")
    if args.netns:
        missing = load_harness().missing_requirements()
        if missing:
            raise SystemExit(f"--netns cannot run here: {missing}")
    if args.vs_loopback:
        compare(args)
        return

    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    sizes = [int(s) for s in args.sizes.split(",")]
    proc_counts = [int(p) for p in args.procs.split(",")]
    managers = ["libp2p-default", "swarm"] if args.conn_manager == "both" else [args.conn_manager]
    where = (
        f"namespaces, {args.delay_ms:g} ± {args.jitter_ms:g} ms one-way, {args.loss:g} loss"
        if args.netns
        else "127.0.0.1"
    )
    table = Table(
        title=f"round exchange on {where} ({os.cpu_count()} cores, {args.messages} exchanges/size, "
        f"idle {args.idle:g} s)"
    )
    for column in (
        "procs",
        "conn mgr",
        "batch",
        "p50 s",
        "p99 s",
        "p99 / base",
        "gossip p99 s",
        "lost",
        "fetch errors",
        "drops",
        "CPU s/proc",
        "CPU / base",
        "idle CPU s/proc",
        "idle / base",
        "load avg",
    ):
        table.add_column(column, justify="right")
    baselines: dict[tuple[int, int] | None, dict[str, Any]] = {}
    notes: list[str] = []
    per_round_tables: list[Any] = []
    with Progress() as progress:
        configs = [(procs, manager) for procs in proc_counts for manager in managers]
        task = progress.add_task("configurations", total=len(configs))
        for procs, manager in configs:
            load_before = os.getloadavg()[0]
            rows = run_on_network(
                "netns" if args.netns else "loopback",
                procs, sizes, args.messages, args.interval, manager, args.idle,
                impairment=impairment_of(args), all_to_all=args.all_to_all,
            )  # fmt: skip
            if args.netns:
                notes.append(f"{procs} procs {manager} switch: {next(iter(rows.values()))['switch']}")
            load = f"{load_before:.1f}-{os.getloadavg()[0]:.1f}"
            if args.per_round:
                per_round_tables.append(round_table(procs, manager, rows))
            first = next(iter(rows.values()))  # errors and drops are per run, all sizes together
            if first["error_reasons"]:
                notes.append(f"{procs} procs {manager} fetch errors: {first['error_reasons']}")
            if first["drop_kinds"]:
                notes.append(f"{procs} procs {manager} adapter counters: {first['drop_kinds']}")
            if first["unsettled"]:
                notes.append(f"{procs} procs {manager}: {first['unsettled']} relays not settled at ready")
            for size, row in rows.items():
                # With `--conn-manager both` each (procs, batch) is compared with py-libp2p's
                # default at the same size; otherwise with the first configuration.
                key = (procs, size) if len(managers) > 1 else None
                baseline = baselines.setdefault(key, row)
                table.add_row(
                    str(procs),
                    manager,
                    f"{size / 1000:g} KB",
                    f"{row['p50']:.3f}",
                    f"{row['p99']:.3f}",
                    ratio(row["p99"], baseline["p99"]),
                    f"{row['gossip_p99']:.3f}",
                    str(row["lost"]),
                    str(row["fetch_errors"]),
                    str(row["drops"]),
                    f"{row['cpu_s']:.2f}",
                    ratio(row["cpu_s"], baseline["cpu_s"]),
                    f"{row['idle_cpu_s']:.2f}",
                    ratio(row["idle_cpu_s"], baseline["idle_cpu_s"]),
                    # The machine's 1-minute load average before-after this configuration: on
                    # a shared machine, other work competes with the processes measured here.
                    load,
                )
            progress.advance(task)
    console = Console(width=160)
    console.print(table)
    for round_rows in per_round_tables:
        console.print(round_rows)
    for note in notes:
        console.print(note)


def run_tcp_floor(
    procs: int, sizes: list[int], args: argparse.Namespace
) -> dict[str, dict[int, dict[str, Any]]]:
    """--tcp-floor: bench/tcp_floor.py's bare TCP exchange, same rounds and interval, on loopback
    and then on fresh namespaces with the same impairment and host TCP."""
    import tcp_floor

    rounds, interval = args.messages, args.interval
    floor = {"loopback": tcp_floor.run_floor(procs, sizes, rounds, interval)}
    harness = load_harness()
    with harness.NetnsNetwork(procs) as network:
        network.impair(delay_ms=args.delay_ms, jitter_ms=args.jitter_ms, loss=args.loss)
        network.tune_tcp(**host_tcp_options(args.host_tcp))
        floor["netns"] = tcp_floor.run_floor(procs, sizes, rounds, interval, network=network)
    return floor


def compare(args: argparse.Namespace) -> None:
    """--vs-loopback: per process count, loopback then the namespaces back to back (so both see
    about the same load from other work on a shared machine), then one markdown table."""
    sizes = [int(s) for s in args.sizes.split(",")]
    # Delay is one-way on each node's egress, the same on every node: a request and its answer
    # cross two egresses.
    rtt_s = 2 * args.delay_ms / 1000
    results: list[dict[str, Any]] = []
    notes: list[str] = []
    per_round_tables: list[Any] = []
    for procs in [int(p) for p in args.procs.split(",")]:
        load_before = os.getloadavg()[0]
        by_network: dict[str, dict[int, dict[str, Any]]] = {}
        for network in ("loopback", "netns"):
            began = time.time()
            try:
                by_network[network] = run_on_network(
                    network, procs, sizes, args.messages, args.interval, args.conn_manager, args.idle,
                    impairment=impairment_of(args), all_to_all=args.all_to_all,
                )  # fmt: skip
            except SystemExit as error:  # the swarm never got ready: a measured failure
                notes.append(f"{procs} procs {network}: {error}")
                print(f"{procs} procs {network}: {error}", file=sys.stderr, flush=True)
                break
            if args.per_round:
                per_round_tables.append(round_table(procs, f"on {network}", by_network[network]))
            first = next(iter(by_network[network].values()))
            for label, key in (("fetch errors", "error_reasons"), ("crashes", "crash_reasons")):
                if first[key]:
                    notes.append(f"{procs} procs {network} {label}: {first[key]}")
            if first["unsettled"]:
                notes.append(f"{procs} procs {network}: {first['unsettled']} relays not settled at ready")
            print(
                f"{procs} procs {network}: {time.time() - began:.0f} s, start-up {first['startup_s']:.1f} s, "
                f"load {os.getloadavg()[0]:.1f}",
                file=sys.stderr,
                flush=True,
            )
        if len(by_network) < 2:
            continue
        floor = run_tcp_floor(procs, sizes, args) if args.tcp_floor else {}
        load = f"{load_before:.1f}–{os.getloadavg()[0]:.1f}"
        for size in sizes:
            results.append(
                {
                    "procs": procs,
                    "size": size,
                    "load": load,
                    "loopback": by_network["loopback"][size],
                    "netns": by_network["netns"][size],
                    **({"floor": {network: rows[size] for network, rows in floor.items()}} if floor else {}),
                }
            )
    print(
        f"round exchange{' all-to-all' if args.all_to_all else ''}: loopback vs namespaces at "
        f"{args.delay_ms:g} ± {args.jitter_ms:g} ms one-way ({rtt_s * 1000:g} ms RTT), {args.loss:g} loss "
        f"per egress; {args.messages} exchanges/size {args.interval:g} s apart; {os.cpu_count()} cores; "
        f"namespaces' host TCP: {args.host_tcp or 'Linux defaults'}"
    )
    print(compare_table(results, rtt_s, args.within_rtts))
    for r in results:
        if "floor" in r:  # the bare TCP exchange's every round, as --per-round shows ours
            rounds = {
                network: ", ".join(f"{t:.3f}" for t in row["rounds"]) for network, row in r["floor"].items()
            }
            print(
                f"TCP floor, {r['procs']} procs x {r['size'] / 1000:g} KB, every round s: "
                f"loopback {rounds['loopback']}; netns {rounds['netns']}"
            )
    if per_round_tables:
        from rich.console import Console

        console = Console(width=160)
        for round_rows in per_round_tables:
            console.print(round_rows)
    for note in notes:
        print(note)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
