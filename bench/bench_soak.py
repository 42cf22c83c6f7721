"""Soak: N local `swarmp2p node` processes for an hour, RSS and CPU of each sampled every minute.

    python bench/bench_soak.py --nodes 10 --minutes 60 --out runs/soak [-- NODE FLAGS]

The nodes are started as scripts/local_swarm.py starts them (node 1 a new swarm, the others
joining it; one torch thread each; own data dirs under OUT). Every `--sample-s` seconds the
bench reads each node's resident memory (VmRSS) and CPU time (utime + stime) from /proc, and the
rounds it has recorded. It writes OUT/soak.jsonl (every sample), OUT/soak.png (RSS and CPU per
node over time) and OUT/summary.json, and prints a table: per node after the warm-up, the RSS
range, its growth (mean of the last third of the samples minus the first third: RSS saws up and
down by ~200 MiB as evaluations allocate and free, which makes a fitted slope noisy; the slope is
shown too), mean CPU and its growth, and rounds completed. "flat": RSS grew at most
`--flat-growth-mib` (50: the tolerance for memory after an attack).
`--attack` floods every node with the attack kit for the whole soak (bench/soak_flood.py; the
attacker's output in OUT/attack.log). `--netns` runs every node in its own network namespace
behind netlab/netns_harness.py's lossy switch (`--delay-ms`, `--jitter-ms`, `--loss` on every
node's egress; needs root); with `--attack` the attacker gets a namespace of its own on the same
switch. `--plot-only` re-reads OUT/soak.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # netlab
from local_swarm import start, stop_nodes, wait_for_address
from procfs import cpu_seconds, rss_mib
from soak_axes import fit_to_settled
from soak_flood import Flood

if TYPE_CHECKING:
    from netlab.netns_harness import NetnsNetwork


def sample_process(pid: int) -> tuple[float, float] | None:
    """(RSS MiB, CPU seconds so far) of `pid` from /proc; None once it is gone."""
    cpu_s = cpu_seconds(pid)
    return None if cpu_s is None else (rss_mib(pid), cpu_s)


def open_fds(pid: int) -> int:
    """How many file descriptors `pid` holds now; 0 once it is gone."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def threads(pid: int) -> int:
    """How many threads `pid` runs now (Threads: of /proc/PID/status); 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class RoundTally:
    """What a node's rounds.jsonl says so far, read on from where the last call stopped (the
    file only grows, and re-reading an hour of rounds every minute for ten nodes would cost the
    CPU the soak measures). A half-written last line is left for the next call."""

    def __init__(self, rounds_file: Path) -> None:
        self.rounds_file = rounds_file
        self.offset = 0
        self.played = 0  # every round line: each round the node saw pass, whatever its fate
        self.completed = 0
        self.trained = 0  # rounds whose update ran on at least one batch
        self.fates: dict[str, int] = {}
        self.rejected = 0  # announcements refused, summed over rounds (each line counts its own)
        self.drops = 0  # the network's drop counters, summed (each line carries the running totals)
        self.last_round = -1

    def read(self) -> None:
        if not self.rounds_file.exists():
            return
        with self.rounds_file.open("rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        for line in complete.decode().splitlines():
            if line.strip():
                self._count(json.loads(line))

    def _count(self, record: dict[str, Any]) -> None:
        self.played += 1
        self.completed += bool(record.get("completed"))
        self.trained += record.get("trained_local", 0) + record.get("trained_external", 0) > 0
        fate = str(record.get("fate", "unknown"))
        self.fates[fate] = self.fates.get(fate, 0) + 1
        self.rejected += sum(record.get("rejected", {}).values())
        self.drops = sum(record.get("network_drops", {}).values())
        self.last_round = int(record.get("round", self.last_round))


def rounds_completed(rounds_file: Path) -> int:
    tally = RoundTally(rounds_file)
    tally.read()
    return tally.completed


def least_squares_slope(points: list[tuple[float, float]]) -> float:
    """Slope of the least-squares line through (x, y) points (0 with fewer than 2 distinct x)."""
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (minutes, value) points, per hour (0 with fewer than 2 points)."""
    return 60 * least_squares_slope(points)


def lossy_network(args: argparse.Namespace, stack: contextlib.ExitStack) -> NetnsNetwork | None:
    """With --netns: a namespace per node (and one for the attacker), impaired as asked."""
    if not args.netns:
        return None
    from netlab.netns_harness import NetnsNetwork, missing_requirements

    if (missing := missing_requirements()) is not None:
        raise SystemExit(f"--netns: {missing}")
    network = stack.enter_context(NetnsNetwork(args.nodes + int(args.attack)))
    network.impair(delay_ms=args.delay_ms, jitter_ms=args.jitter_ms, loss=args.loss)
    return network


def start_node(
    index: int, args: argparse.Namespace, bootstrap: str | None, network: NetnsNetwork | None
) -> subprocess.Popen:
    """Node `index` (from 1) as scripts/local_swarm.py starts it, or inside its namespace."""
    if network is None:
        return start(index, args.out, bootstrap, args.extra, "test")
    from netlab.netns_harness import address

    command = [
        *network.exec_args(index - 1),
        sys.executable, "-m", "swarmp2p.cli", "node", "--data-dir", str(args.out / f"node-{index}"),
        "--threads", "1", "--eval-split", "test", "--listen", f"/ip4/{address(index - 1)}/tcp/4001",
        *args.extra, *(["--bootstrap", bootstrap] if bootstrap else []),
    ]  # fmt: skip
    log = open(args.out / f"node-{index}.log", "w")  # the child holds it; closed at exit
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)


def run(args: argparse.Namespace, samples_file: Path) -> None:
    processes: list[subprocess.Popen] = []
    previous_cpu: dict[int, tuple[float, float]] = {}
    with contextlib.ExitStack() as stack:
        network = lossy_network(args, stack)
        try:
            soak(args, samples_file, processes, previous_cpu, network)
        finally:
            stop_nodes(processes)


def soak(
    args: argparse.Namespace,
    samples_file: Path,
    processes: list[subprocess.Popen],
    previous_cpu: dict[int, tuple[float, float]],
    network: NetnsNetwork | None,
) -> None:
    flood: Flood | None = None
    try:
        first = start_node(1, args, None, network)
        processes.append(first)
        address = wait_for_address(args.out / "node-1.log", first, timeout_s=900)
        processes += [start_node(i, args, address, network) for i in range(2, args.nodes + 1)]
        if args.attack:
            attacker = tuple(network.exec_args(args.nodes)) if network is not None else ()
            infos = node_infos(args.out, processes)
            flood = Flood(infos, *round_clock(args.out), args.out / "attack.log", prefix=attacker)
        began = time.monotonic()
        tallies: dict[int, RoundTally] = {}
        with samples_file.open("w") as out:
            while (elapsed := time.monotonic() - began) < args.minutes * 60:
                wait_keeping_the_flood(min(args.sample_s, max(0.0, args.minutes * 60 - elapsed)), flood)
                minute = (time.monotonic() - began) / 60
                total_rss = 0.0
                load = os.getloadavg()[0]
                for index, process in enumerate(processes, 1):
                    sample = sample_process(process.pid)
                    if sample is None or process.poll() is not None:
                        raise SystemExit(
                            f"node {index} exited during the soak; see {args.out}/node-{index}.log"
                        )
                    rss, cpu = sample
                    total_rss += rss
                    last_minute, last_cpu = previous_cpu.get(index, (0.0, 0.0))
                    previous_cpu[index] = (minute, cpu)
                    cpu_pct = 100 * (cpu - last_cpu) / max(1e-9, (minute - last_minute) * 60)
                    tally = tallies.setdefault(index, RoundTally(args.out / f"node-{index}" / "rounds.jsonl"))
                    tally.read()
                    row = {
                        "node": index,
                        "minute": minute,
                        "rss_mib": rss,
                        "cpu_pct": cpu_pct,
                        "fds": open_fds(process.pid),
                        "threads": threads(process.pid),
                        "rounds": tally.completed,
                        "played": tally.played,
                        "trained": tally.trained,
                        "round": tally.last_round,
                        "fates": dict(tally.fates),
                        "rejected": tally.rejected,
                        "drops": tally.drops,
                        "load1": load,
                        "flood_runs": flood.runs if flood is not None else 0,
                    }
                    out.write(json.dumps(row) + "\n")
                out.flush()
                played = sum(tally.played for tally in tallies.values())
                print(
                    f"{time.strftime('%H:%M:%S')} minute {minute:5.1f}: RSS {total_rss:7.0f} MiB in all,"
                    f" {played} rounds played, drops {sum(t.drops for t in tallies.values())},"
                    f" flood runs {flood.runs if flood is not None else 0},"
                    f" load {load:.2f}",
                    flush=True,
                )
    finally:
        if flood is not None:
            flood.stop()


FLOOD_CHECK_S = 5.0  # how soon an attacker run that ended is replaced, within a sample's wait


def wait_keeping_the_flood(seconds: float, flood: Flood | None) -> None:
    """Sleep `seconds`, restarting the attacker whenever its run ends: checked once a sample, a
    run that ends just after the check would leave the nodes unflooded for most of a minute."""
    ends = time.monotonic() + seconds
    while True:
        if flood is not None:
            flood.keep_running()
        left = ends - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, FLOOD_CHECK_S) if flood is not None else left)


def node_infos(out: Path, processes: list[subprocess.Popen]) -> list[dict[str, Any]]:
    """Every node's node.json, once each has written it (it is written when the node listens)."""
    paths = [out / f"node-{index}" / "node.json" for index in range(1, len(processes) + 1)]
    while not all(path.exists() for path in paths):
        if any(process.poll() is not None for process in processes):
            raise SystemExit(f"a node exited before it listened; see {out}/node-*.log")
        time.sleep(1)
    return [json.loads(path.read_text()) for path in paths]


def round_clock(out: Path) -> tuple[float, float]:
    """(round seconds, wall time of round 0) of the swarm node 1 started."""
    schedule = json.loads((out / "node-1" / "node.json").read_text())["schedule"]
    return schedule["round_ms"] / 1000, schedule["genesis_ms"] / 1000


def thirds_growth(values: list[float]) -> float:
    """Mean of the last third minus mean of the first third: the growth over the window, robust
    to the sawtooth a node's RSS makes (an evaluation every few rounds allocates, then frees)."""
    third = max(1, len(values) // 3)
    return sum(values[-third:]) / third - sum(values[:third]) / third


SERIES = ("rss_mib", "cpu_pct", "fds", "threads", "played", "trained", "rejected", "drops")
"""What every sample holds per node and the summary gives a slope for (per hour and per 1,000 of
the swarm's rounds). The last four are counters: their slope is a rate (rounds played per 1,000
rounds is ~1,000 for a node that sees every round), not growth."""


def slope_per_1000(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (round, value) points, per 1,000 rounds (0 with fewer than 2
    distinct rounds)."""
    return 1000 * least_squares_slope(points)


def series_slopes(settled: list[dict[str, Any]]) -> dict[str, float]:
    """Each series' slope per hour and per 1,000 swarm rounds, and its range, over the samples
    after the warm-up that carry it (a soak written before a series was sampled has none)."""
    slopes: dict[str, float] = {}
    timed = [row for row in settled if row.get("round", -1) >= 0]
    for series in SERIES:
        if not all(series in row for row in settled):
            continue
        values = [float(row[series]) for row in settled]
        slopes[f"{series}_per_hour"] = slope_per_hour(
            [(row["minute"], value) for row, value in zip(settled, values, strict=True)]
        )
        slopes[f"{series}_per_1000_rounds"] = slope_per_1000(
            [(float(row["round"]), float(row[series])) for row in timed]
        )
        slopes[f"{series}_min"], slopes[f"{series}_max"] = min(values), max(values)
    return slopes


def summarize(rows: list[dict[str, Any]], warmup_min: float, flat_growth_mib: float) -> dict[int, dict]:
    summary: dict[int, dict] = {}
    for node in sorted({row["node"] for row in rows}):
        mine = [row for row in rows if row["node"] == node]
        settled = [row for row in mine if row["minute"] >= warmup_min] or mine[-1:]
        rss = [row["rss_mib"] for row in settled]
        growth = thirds_growth(rss)
        summary[node] = {
            **series_slopes(settled),
            "fates": mine[-1].get("fates", {}),
            "swarm_round": mine[-1].get("round", -1),
            "rss_after_warmup_mib": rss[0],
            "rss_end_mib": rss[-1],
            "rss_min_mib": min(rss),
            "rss_max_mib": max(rss),
            "rss_growth_mib": growth,
            "rss_slope_mib_per_hour": slope_per_hour([(row["minute"], row["rss_mib"]) for row in settled]),
            "cpu_pct_mean": sum(row["cpu_pct"] for row in settled) / len(settled),
            "cpu_growth_pct": thirds_growth([row["cpu_pct"] for row in settled]),
            "rounds": mine[-1]["rounds"],
            "flat": growth <= flat_growth_mib,
        }
    return summary


PANELS = {
    "rss_mib": "RSS (MiB)",
    "cpu_pct": "CPU (% of a core)",
    "fds": "open fds",
    "played": "rounds played\n(dotted: trained)",
    "drops": "network drops\n(thousands)",
    "load1": "load average\n(1 min, host)",
}


def plot(path: Path, rows: list[dict[str, Any]], warmup_min: float) -> None:
    """One panel per quantity over the soak's minutes, a line per node (the same colour in every
    panel); panels for quantities the samples lack (an older soak) are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {key: label for key, label in PANELS.items() if rows and all(key in row for row in rows)}
    figure, axes = plt.subplots(len(panels), 1, figsize=(8, 1.9 * len(panels) + 0.6), sharex=True)
    axes = list(axes) if len(panels) > 1 else [axes]
    colours = plt.get_cmap("tab10").colors
    nodes = sorted({row["node"] for row in rows})
    for number, node in enumerate(nodes):
        mine = [row for row in rows if row["node"] == node]
        minutes = [row["minute"] for row in mine]
        colour = colours[number % len(colours)]
        for axis, key in zip(axes, panels, strict=True):
            if key == "load1":
                if number == 0:  # one host, one line: every node's sample carries the same load
                    axis.plot(minutes, [row[key] for row in mine], lw=1.0, color="black")
                continue
            scale = 1000 if key == "drops" else 1
            axis.plot(minutes, [row[key] / scale for row in mine], lw=1.0, color=colour, label=f"node {node}")
            if key == "played" and "trained" in mine[0]:
                axis.plot(minutes, [row["trained"] for row in mine], lw=1.0, color=colour, ls=":")
    settled_rss = [float(row["rss_mib"]) for row in rows if row["minute"] >= warmup_min and "rss_mib" in row]
    for axis, key, label in zip(axes, panels, panels.values(), strict=True):
        axis.set_ylabel(label, fontsize=8)
        if key == "rss_mib" and settled_rss:
            fit_to_settled(axis, settled_rss, label)
        else:
            axis.set_ylim(bottom=0, top=max(1.0, axis.get_ylim()[1] * 1.05))
        axis.axvline(warmup_min, color="grey", ls=":", lw=1)
        axis.grid(alpha=0.3)
        axis.tick_params(labelsize=8)
    axes[-1].set_xlabel(f"minutes (grey dotted: end of the {warmup_min:g}-minute warm-up)")
    axes[0].set_title(f"soak: {len(nodes)} swarmp2p nodes, sampled per minute", fontsize=10)
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def slopes_table(summary: dict[int, dict], warmup_min: float) -> Table:
    """Per sampled quantity, over the nodes: its range and its slope per 1,000 swarm rounds and
    per hour after the warm-up (the median node's, and the lowest and highest node's)."""
    table = Table(title=f"soak: every node's quantities after a {warmup_min:g}-minute warm-up")
    for column in ("quantity", "range", "/1,000 rounds: median (min..max)", "/hour: median (min..max)"):
        table.add_column(column, justify="right")
    for series in SERIES:
        if any(f"{series}_per_1000_rounds" not in row for row in summary.values()):
            continue
        rows = summary.values()
        low, high = min(row[f"{series}_min"] for row in rows), max(row[f"{series}_max"] for row in rows)
        cells = [f"{low:.0f}-{high:.0f}"]
        for unit in ("per_1000_rounds", "per_hour"):
            slopes = sorted(row[f"{series}_{unit}"] for row in rows)
            cells.append(f"{slopes[len(slopes) // 2]:+.0f} ({slopes[0]:+.0f}..{slopes[-1]:+.0f})")
        table.add_row(series, *cells)
    return table


def fates_line(summary: dict[int, dict]) -> str:
    """The fates of every node's rounds, summed (the warm-up's rounds too)."""
    total: dict[str, int] = {}
    for row in summary.values():
        for fate, count in row["fates"].items():
            total[fate] = total.get(fate, 0) + count
    return "fates, all nodes: " + ", ".join(f"{fate} {count}" for fate, count in sorted(total.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--sample-s", type=float, default=60.0)
    parser.add_argument("--warmup-min", type=float, default=10.0)
    parser.add_argument("--flat-growth-mib", type=float, default=50.0)
    parser.add_argument("--out", type=Path, default=Path("runs/soak"))
    parser.add_argument("--attack", action="store_true", help="flood the nodes with the attack kit")
    parser.add_argument("--netns", action="store_true", help="nodes in lossy namespaces (root)")
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--jitter-ms", type=float, default=10.0)
    parser.add_argument("--loss", type=float, default=0.02)
    parser.add_argument("--plot-only", action="store_true")
    parser.add_argument("extra", nargs="*", help="more `swarmp2p node` flags, after --")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    samples_file = args.out / "soak.jsonl"
    if not args.plot_only:
        run(args, samples_file)
    rows = [json.loads(line) for line in samples_file.read_text().splitlines()]
    summary = summarize(rows, args.warmup_min, args.flat_growth_mib)
    plot(args.out / "soak.png", rows, args.warmup_min)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    table = Table(title=f"soak: RSS and CPU per node after a {args.warmup_min:g}-minute warm-up")
    columns = ("node", "RSS range", "RSS growth", "slope MiB/h", "CPU % mean", "CPU growth", "rounds", "flat")
    for column in columns:
        table.add_column(column, justify="right")
    for node, row in summary.items():
        table.add_row(
            str(node),
            f"{row['rss_min_mib']:.0f}-{row['rss_max_mib']:.0f}",
            f"{row['rss_growth_mib']:+.0f}",
            f"{row['rss_slope_mib_per_hour']:+.0f}",
            f"{row['cpu_pct_mean']:.1f}",
            f"{row['cpu_growth_pct']:+.1f}",
            str(row["rounds"]),
            "yes" if row["flat"] else "NO",
        )
    Console().print(table)
    Console().print(slopes_table(summary, args.warmup_min))
    print(fates_line(summary))
    print(f"{args.out / 'soak.png'}, {args.out / 'summary.json'} (load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
