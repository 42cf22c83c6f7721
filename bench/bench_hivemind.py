"""The round exchange on our libp2p adapter and on the reference stack (hivemind's DHT), side by side.

One round: every process shares a batch and wants every other process's batch. Ours: each
process gossips an announcement and serves its batch over /swarmp2p/fetch/1.0.0; the others
fetch it on hearing the announcement (bench_network.py --all-to-all; its worker and
orchestration are reused). Reference: what RL Swarm does with hivemind, each process stores
its batch in the DHT under key = round, subkey = its peer id, then reads the key until it
holds every batch (bench/hivemind_worker.py, run with hivemind's own Python).

Per (processes, batch size, stack): p50 / p99 of the time from a round's start until every
process holds every batch (a round in which any batch never arrived is infinite); batches lost
(not held 30 s after the round); processes that crashed or hung (their reason under the table);
CPU seconds per process (a hivemind peer is three processes: the worker, its forked DHT
process and the Go p2pd daemon, all counted); peak memory per process (PSS, shared pages
counted once); start-up of the swarm (from launching the first process until every one is
ready). Ratios are ours / hivemind's. Configurations run interleaved (ours, then hivemind's, per
process count) so both see the same load on a shared machine.

hivemind lives in its own virtual environment (it pins its own torch, protobuf and grpc):

    python3 -m venv ~/hm-venv && ~/hm-venv/bin/pip install hivemind
    python bench/bench_hivemind.py --hivemind-python ~/hm-venv/bin/python    # or HIVEMIND_PYTHON=...
    python bench/bench_hivemind.py --procs 5 --sizes 10000 --rounds 3        # a quick look

`--network netns` runs both stacks with every process in its own network namespace behind
netlab/netns_harness.py's delaying, lossy switch (root, iproute2, /dev/net/tun; the kernel here has
no sch_netem), `--network both` on loopback and then in the namespaces for each process count, in
one table with a network column:

    python bench/bench_hivemind.py --network both --procs 5,10 --sizes 10000 --delay-ms 50 --loss 0.01

`--repeats N` runs every configuration N times (interleaved: ours, hivemind, ours, ...) and
prints each run's table, then the medians (lost and crashed summed over the runs), on which the
targets are judged: at 20 processes on 2 cores one run can fall into a backlog that never drains
(p99 27.9 s against 5.7 s in the next run, 2026-11-27), so a single run says little.

Targets: at 20 processes with 10 KB batches, our p99 at most 1/8 of hivemind's and
our CPU per process at most half of hivemind's; 1 MB batches with nothing lost.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_network import host_tcp_options, impairment_of, load_harness, run_on_network  # noqa: E402

STACKS = ("ours", "hivemind")
NETWORKS = {"loopback": ("loopback",), "netns": ("netns",), "both": ("loopback", "netns")}


def check_hivemind(python: str) -> str:
    """Empty when `python` can import hivemind; otherwise the one-line reason it cannot."""
    if not python:
        return "no hivemind Python given (--hivemind-python or HIVEMIND_PYTHON)"
    if not Path(python).exists():
        return f"{python} does not exist"
    probe = subprocess.run(
        [python, "-c", "import hivemind; print(hivemind.__version__)"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        return f"{python} cannot import hivemind: {lines[-1] if lines else probe.returncode}"
    return ""


def ratio(ours: float, theirs: float) -> str:
    if math.isnan(ours) or math.isnan(theirs):
        return "-"
    if math.isinf(theirs):
        return "0x (theirs never completed)" if not math.isinf(ours) else "-"
    if math.isinf(ours):
        return "inf (ours never completed)"
    if theirs == 0:
        return "-"
    return f"{ours / theirs:.2f}x"


def seconds(value: float) -> str:
    if math.isinf(value):
        return "never"
    if math.isnan(value):
        return "-"
    return f"{value:.2f}"


def markdown_table(results: list[dict[str, Any]]) -> str:
    """One row per (network, procs, batch, stack); ratio columns (ours / hivemind) on our rows."""
    header = (
        "| network | procs | batch | stack | p50 s | p99 s | p99 ours/hm | lost | crashed | CPU s/proc "
        "| CPU ours/hm | peak MiB/proc | MiB ours/hm | start-up s | start-up ours/hm |"
    )
    lines = [header, "|---" * 15 + "|"]
    by_key = {(r["network"], r["procs"], r["size"], r["stack"]): r for r in results}
    for r in results:
        theirs = (
            by_key.get((r["network"], r["procs"], r["size"], "hivemind")) if r["stack"] == "ours" else None
        )

        def cmp(field: str, r: dict[str, Any] = r, theirs: dict[str, Any] | None = theirs) -> str:
            return ratio(r[field], theirs[field]) if theirs is not None else ""

        first = f"| {r['network']} | {r['procs']} | {r['size'] / 1000:g} KB | {r['stack']} "
        if r.get("failed"):
            lines.append(f"{first}| {r['failed']} |" + " |" * 10)
            continue
        lines.append(
            f"{first}| {seconds(r['p50'])} "
            f"| {seconds(r['p99'])} | {cmp('p99')} | {r['lost']} | {r['crashed']} | {r['cpu_s']:.2f} "
            f"| {cmp('cpu_s')} | {r['peak_mib']:.0f} | {cmp('peak_mib')} | {r['startup_s']:.1f} "
            f"| {cmp('startup_s')} |"
        )
    return "\n".join(lines)


MEDIAN_FIELDS = ("p50", "p99", "cpu_s", "peak_mib", "startup_s")
SUMMED_FIELDS = ("lost", "crashed")


def median_of_measured(values: Iterable[float]) -> float:
    """The median of the values that were measured: a run whose peers all crashed has no CPU
    figure (nan), and one nan made the whole median nan. inf (a round never completed) is a
    measurement and stays in. nan when nothing was measured."""
    measured = [value for value in values if not math.isnan(value)]
    return statistics.median(measured) if measured else math.nan


def medians(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (procs, batch, stack) over the runs (`run` 1..N): the median of each timing,
    CPU and memory figure over the runs that started, lost and crashed summed over those runs,
    `runs` how many started; `failed` (the first reason) when none did. A never-completed round
    (inf) sorts last, so it is the median only when most runs had one."""
    groups: dict[tuple[str, int, int, str], list[dict[str, Any]]] = {}
    for row in results:
        groups.setdefault((row["network"], row["procs"], row["size"], row["stack"]), []).append(row)
    summary = []
    for (network, procs, size, stack), rows in groups.items():
        ran = [r for r in rows if not r.get("failed")]
        row: dict[str, Any] = {
            "network": network, "procs": procs, "size": size, "stack": stack, "runs": len(ran)
        }  # fmt: skip
        if not ran:
            row["failed"] = rows[0]["failed"]
        else:
            row.update({field: median_of_measured(r[field] for r in ran) for field in MEDIAN_FIELDS})
            row.update({field: sum(r[field] for r in ran) for field in SUMMED_FIELDS})
        summary.append(row)
    return summary


def targets(results: list[dict[str, Any]]) -> list[str]:
    """The targets, each `met` / `not met` / `not measured`, with the figures. They are
    set on loopback; the namespaces' rows get a line each for 20 processes x 10 KB, no target."""
    by_key = {
        (r["procs"], r["size"], r["stack"]): r
        for r in results
        if not r.get("failed") and r["network"] == "loopback"
    }
    ours, theirs = by_key.get((20, 10000, "ours")), by_key.get((20, 10000, "hivemind"))
    lines = []
    if ours and theirs:
        met = ours["p99"] <= theirs["p99"] / 8
        lines.append(
            f"20 procs, 10 KB: p99 ours {seconds(ours['p99'])} s <= hivemind {seconds(theirs['p99'])} s / 8: "
            + ("met" if met else "not met")
        )
        met = ours["cpu_s"] <= theirs["cpu_s"] / 2
        lines.append(
            f"20 procs, 10 KB: CPU ours {ours['cpu_s']:.2f} s <= hivemind {theirs['cpu_s']:.2f} s / 2: "
            + ("met" if met else "not met")
        )
    else:
        lines.append("20 procs, 10 KB against hivemind: not measured")
    big = [r for (procs, size, stack), r in by_key.items() if size == 1000000 and stack == "ours"]
    if big:
        lost = sum(r["lost"] + r["crashed"] for r in big)
        lines.append(f"1 MB batches, ours: {lost} lost or crashed: " + ("met" if lost == 0 else "not met"))
    else:
        lines.append("1 MB batches: not measured")
    netns = {
        r["stack"]: r
        for r in results
        if r["network"] == "netns" and r["procs"] == 20 and r["size"] == 10000 and not r.get("failed")
    }
    if "ours" in netns and "hivemind" in netns:
        ours, theirs = netns["ours"], netns["hivemind"]
        lines.append(
            f"namespaces, 20 procs, 10 KB (no target): p99 ours {seconds(ours['p99'])} s, hivemind "
            f"{seconds(theirs['p99'])} s ({ratio(ours['p99'], theirs['p99'])}); CPU "
            f"{ratio(ours['cpu_s'], theirs['cpu_s'])}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--procs", default="5,10,20")
    parser.add_argument("--sizes", default="10000,200000,1000000")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per batch size")
    parser.add_argument("--interval", type=float, default=8.0, help="seconds between round starts")
    parser.add_argument(
        "--round-timeout",
        type=float,
        default=30.0,
        help="hivemind: seconds a peer reads a round's key before it gives up on the round",
    )
    parser.add_argument("--stacks", default="ours,hivemind", help="ours, hivemind or both (comma-separated)")
    parser.add_argument("--hivemind-python", default=os.environ.get("HIVEMIND_PYTHON", ""))
    parser.add_argument(
        "--network",
        choices=sorted(NETWORKS),
        default="loopback",
        help="loopback, netns (every process in its own namespace behind a delaying, lossy switch), or both",
    )
    parser.add_argument("--delay-ms", type=float, default=50.0, help="netns: one-way delay per node")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="netns: ± uniform jitter per packet")
    parser.add_argument("--loss", type=float, default=0.01, help="netns: packet loss on every node's egress")
    parser.add_argument(
        "--host-tcp", default="", help="netns: the namespaces' host TCP (bench_network.py --host-tcp)"
    )
    parser.add_argument("--json", default="", help="also write the rows here")
    parser.add_argument(
        "--repeats", type=int, default=1, help="run every configuration N times; the targets use the medians"
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    host_tcp_options(args.host_tcp)  # a wrong --host-tcp says so before any namespace is made

    networks = NETWORKS[args.network]
    if "netns" in networks:
        missing = load_harness().missing_requirements()
        if missing:
            raise SystemExit(f"--network {args.network} cannot run here: {missing}")
    stacks = [s for s in args.stacks.split(",") if s]
    if "hivemind" in stacks:
        missing = check_hivemind(args.hivemind_python)
        if missing:
            print(f"hivemind: not run: {missing}", flush=True)
            stacks.remove("hivemind")
    sizes = [int(s) for s in args.sizes.split(",")]
    if "netns" in networks:
        print(
            f"netns: every process in its own namespace, {args.delay_ms:g} ± {args.jitter_ms:g} ms "
            f"one-way ({2 * args.delay_ms:g} ms RTT), {args.loss:g} loss on every node's egress",
            flush=True,
        )
    results: list[dict[str, Any]] = []
    notes: list[str] = []
    process_counts = [int(p) for p in args.procs.split(",")]
    runs = [
        (procs, run, network)
        for procs in process_counts
        for run in range(1, args.repeats + 1)
        for network in networks
    ]
    for procs, run, network in runs:
        for stack in stacks:
            if stack == "ours":
                command = None
                grace = 30.0
            else:
                command = [args.hivemind_python, str(HERE / "hivemind_worker.py")]
                command += ["--round-timeout", str(args.round_timeout)]
                # Rounds run one after another in the reference: each may take its timeout.
                grace = 30.0 + len(sizes) * args.rounds * args.round_timeout
            load = os.getloadavg()[0]
            began = time.time()
            label = f"{procs} procs {stack} on {network} (run {run})"
            key = {"network": network, "procs": procs, "stack": stack, "run": run}
            try:
                rows = run_on_network(
                    network, procs, sizes, args.rounds, args.interval, "swarm", 0.0,
                    impairment=impairment_of(args), all_to_all=True, command=command, grace_s=grace,
                )  # fmt: skip
            except SystemExit as error:  # the swarm never got ready: a measured failure
                for size in sizes:
                    results.append({**key, "size": size, "failed": str(error)})
                print(f"{label}: {error}", flush=True)
                continue
            for size, row in rows.items():
                keep = ("p50", "p99", "lost", "crashed", "cpu_s", "peak_mib", "startup_s", "fetch_errors")
                results.append({**key, "size": size, **{k: row[k] for k in keep}})
            first = next(iter(rows.values()))
            for what, field in (("errors", "error_reasons"), ("crashes", "crash_reasons")):
                if first[field]:
                    notes.append(f"{label} {what}: {first[field]}")
            took = time.time() - began
            print(f"{label}: {took:.0f} s, load {load:.1f}-{os.getloadavg()[0]:.1f}", flush=True)
    summary = results
    if args.repeats > 1:
        for run in range(1, args.repeats + 1):
            print(f"\nrun {run} of {args.repeats}")
            print(markdown_table([r for r in results if r["run"] == run]))
        summary = medians(results)
        print(f"\nmedians of {args.repeats} runs (lost and crashed: summed)")
    print(markdown_table(summary))
    for note in notes:
        print(note)
    for line in targets(summary):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
