"""Simulator speed: wall time, CPU time and peak memory for N peers x R rounds, as a rich table.

Each size runs in a fresh subprocess (peak RSS is that run's own) that reports after every round,
so a size that runs past `--cap-s` is stopped and still gets a row: the rounds it finished, its
measured cost per round, and the total that cost extrapolates to (marked "capped"). Ratios are
against the first size, measured in the same invocation.

    python bench/bench_simulator.py                      # 100/300/1000 x 50 and 100 x 100
    python bench/bench_simulator.py --sizes 100x100 --fetch-sample 0 --cap-s 120
    python bench/bench_simulator.py --sizes 10000x20 --cap-s 14400 --max-rss-mib 8192 --events 10k.jsonl
    python bench/bench_simulator.py --sizes 1000x50 --workers 1,2   # one process and two, side by side

A progress bar shows each size's rounds and memory as they finish; `--events` also appends them
to a file, so a run of hours that is stopped (or a session that ends) leaves its progress.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from procfs import descendants, tree_rss_mib
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

CHILD = """
import json, multiprocessing, resource, sys, time
t0_wall, t0_cpu = time.perf_counter(), time.process_time()
sys.path.insert(0, "bench")
from procfs import cpu_seconds, peak_rss_mib
from simulator.runner import run_simulation
from simulator.scenario import Scenario
peers, rounds, sample, workers = (int(arg) for arg in sys.argv[1:5])

def cpu_now():
    # this process, plus its simulation workers while they run (and once they are reaped)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = sum(cpu_seconds(child.pid) or 0.0 for child in multiprocessing.active_children())
    return time.process_time() + children.ru_utime + children.ru_stime + live

def emit(**fields):
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork and exec, so a child of a big
    # process (a test runner's worker) would report its launcher's peak as its own
    fields["rss_mib"] = peak_rss_mib()
    print(json.dumps(fields), flush=True)

if __name__ == "__main__":
    start_wall, start_cpu = time.perf_counter(), cpu_now()
    emit(event="start", import_s=start_wall - t0_wall)
    result = run_simulation(
        Scenario(peers=peers, rounds=rounds, seed=1, fetch_sample=sample, workers=workers),
        on_round=lambda r: emit(event="round", round=r, wall_s=time.perf_counter() - start_wall,
                                cpu_s=cpu_now() - start_cpu),
    )
    completed = sum(1 for records in result.records.values() for r in records if r.completed)
    emit(event="done", wall_s=time.perf_counter() - start_wall, cpu_s=cpu_now() - start_cpu,
         completed=completed)
"""


class EventReader:
    """The child's JSON lines as they come (a line is taken only once it is complete)."""

    def __init__(self, path: Path) -> None:
        self._file = path.open()
        self._partial = ""

    def new_events(self) -> list[dict]:
        text = self._partial + self._file.read()
        lines = text.split("\n")
        self._partial = lines.pop()  # "" after a complete last line
        return [json.loads(line) for line in lines if line.strip()]

    def close(self) -> None:
        self._file.close()


def run_size(
    peers: int,
    rounds: int,
    sample: int,
    cap_s: float,
    max_rss_mib: float = float("inf"),
    on_event: Callable[[dict], None] | None = None,
    workers: int = 1,
) -> dict:
    """Run one size; returns its measurements (complete, or up to the cap). A run whose
    resident memory passes `max_rss_mib` is stopped too (and marked `over_memory`).
    `on_event` gets each of the child's events (start, each round, done) as it happens, with
    the child's resident memory now (`rss_now_mib`)."""
    events: list[dict] = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "events.jsonl"
        # The child writes through its own handle, the parent reads through another (a shared
        # handle would share one file offset between the writer and the reader).
        with path.open("w") as child_out:
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(peers), str(rounds), str(sample), str(workers)],
                stdout=child_out,
                stderr=subprocess.DEVNULL,
                cwd=Path(__file__).resolve().parent.parent,
            )
        reader = EventReader(path)
        capped = over_memory = False
        deadline = time.monotonic() + cap_s
        peak_seen = now_mib = 0.0

        def take_events() -> None:
            for event in reader.new_events():
                events.append(event)
                if on_event is not None:
                    on_event({**event, "rss_now_mib": now_mib})

        try:
            while True:
                running = child.poll() is None
                if running:  # after the child's end: its last reading stands
                    now_mib = tree_rss_mib(child.pid) or now_mib  # its workers' memory too
                peak_seen = max(peak_seen, now_mib)
                take_events()
                if not running:
                    break
                if peak_seen > max_rss_mib:
                    over_memory = True
                if over_memory or time.monotonic() > deadline:
                    for worker in descendants(child.pid):
                        os.kill(worker, signal.SIGKILL)
                    child.kill()
                    child.wait()
                    capped = True
                    take_events()  # lines written before the kill: reported like the others
                    break
                time.sleep(0.25)
        finally:
            reader.close()
    rounds_done = [e for e in events if e["event"] == "round"]
    done = next((e for e in events if e["event"] == "done"), None)
    last = done or (rounds_done[-1] if rounds_done else None)
    measured = {
        "peers": peers,
        "rounds": rounds,
        "workers": workers,
        "capped": capped or done is None,
        "rounds_done": len(rounds_done),
        "wall_s": last["wall_s"] if last else float("nan"),
        "cpu_s": last["cpu_s"] if last else float("nan"),
        "peak_mib": max([e["rss_mib"] for e in events] + [peak_seen]),
        "over_memory": over_memory,
    }
    # Per-round cost from the rounds after the first (the first also builds every peer).
    if len(rounds_done) >= 3:
        first, final = rounds_done[0], rounds_done[-1]
        steady = len(rounds_done) - 1
        measured["cpu_per_round_s"] = (final["cpu_s"] - first["cpu_s"]) / steady
        measured["wall_per_round_s"] = (final["wall_s"] - first["wall_s"]) / steady
    elif rounds_done:
        measured["cpu_per_round_s"] = rounds_done[-1]["cpu_s"] / len(rounds_done)
        measured["wall_per_round_s"] = rounds_done[-1]["wall_s"] / len(rounds_done)
    if measured["capped"] and "cpu_per_round_s" in measured:
        remaining = rounds - len(rounds_done)
        measured["est_wall_s"] = measured["wall_s"] + remaining * measured["wall_per_round_s"]
        measured["est_cpu_s"] = measured["cpu_s"] + remaining * measured["cpu_per_round_s"]
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="100x50,300x50,1000x50,100x100", help="comma-separated PEERSxROUNDS"
    )
    parser.add_argument(
        "--fetch-sample", type=int, default=8, help="batches verified per peer-round (0 = all)"
    )
    parser.add_argument("--cap-s", type=float, default=300.0, help="stop a size after this many seconds")
    parser.add_argument(
        "--max-rss-mib", type=float, default=float("inf"), help="stop a size whose memory passes this"
    )
    parser.add_argument(
        "--workers",
        default="1",
        help="comma-separated worker process counts to run each size with (e.g. 1,2: side by side)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    parser.add_argument(
        "--events",
        type=Path,
        default=None,
        help="append every round's event (time, CPU, memory) to this JSON-lines file as it happens: "
        "a run of hours leaves its progress behind even if it is stopped",
    )
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 150)
    rows = []
    worker_counts = [int(count) for count in args.workers.split(",")]
    for size, workers in [(size, count) for size in args.sizes.split(",") for count in worker_counts]:
        peers, rounds = (int(part) for part in size.lower().split("x"))
        console.print(
            f"running {peers} peers x {rounds} rounds, {workers} worker(s) (cap {args.cap_s:.0f} s) ..."
        )
        started = time.perf_counter()
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("rounds"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[memory]}"),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task(f"{peers} x {rounds}", total=rounds, memory="")

            def on_event(event: dict, peers: int = peers, rounds: int = rounds, task: TaskID = task) -> None:
                if event["event"] == "round":
                    progress.update(
                        task, completed=event["round"] + 1, memory=f"{event['rss_now_mib']:.0f} MiB"
                    )
                if args.events is not None:
                    with args.events.open("a") as out:
                        out.write(json.dumps({"peers": peers, "rounds": rounds, **event}) + "\n")

            measured = run_size(
                peers, rounds, args.fetch_sample, args.cap_s, args.max_rss_mib, on_event, workers=workers
            )
        measured["process_s"] = time.perf_counter() - started
        rows.append(measured)
        console.print(f"  {json.dumps(measured)}")

    base = rows[0]
    table = Table(title=f"simulator: time and memory (fetch_sample={args.fetch_sample}, seed 1)")
    for column in (
        "peers",
        "rounds",
        "workers",
        "status",
        "wall s",
        "CPU s",
        "CPU s/round",
        "peer-rounds/s",
        "peak MiB",
        "wall x base",
        "work x base",
        "wall x 1 worker",
    ):
        table.add_column(column, justify="right")
    one_worker = {(row["peers"], row["rounds"]): row for row in rows if row.get("workers", 1) == 1}
    base_work = base["peers"] * base["rounds"]
    for row in rows:
        if row["capped"]:
            why = "over memory" if row.get("over_memory") else "capped"
            status = f"{why} {row['rounds_done']}/{row['rounds']}"
            wall = f"{row['wall_s']:.1f} (est. {row.get('est_wall_s', float('nan')):.0f})"
            cpu = f"{row['cpu_s']:.1f} (est. {row.get('est_cpu_s', float('nan')):.0f})"
            total_wall = row.get("est_wall_s", float("nan"))
        else:
            status = "done"
            wall, cpu = f"{row['wall_s']:.1f}", f"{row['cpu_s']:.1f}"
            total_wall = row["wall_s"]
        alone = one_worker.get((row["peers"], row["rounds"]))
        alone_wall = float("nan")
        if alone is not None:
            alone_wall = alone.get("est_wall_s", float("nan")) if alone["capped"] else alone["wall_s"]
        table.add_row(
            str(row["peers"]),
            str(row["rounds"]),
            str(row.get("workers", 1)),
            status,
            wall,
            cpu,
            f"{row.get('cpu_per_round_s', float('nan')):.3f}",
            f"{row['peers'] / row.get('wall_per_round_s', float('nan')):.0f}",
            f"{row['peak_mib']:.0f}",
            f"{total_wall / base['wall_s']:.2f}",
            f"{row['peers'] * row['rounds'] / base_work:.1f}",
            f"{total_wall / alone_wall:.2f}",
        )
    console.print(table)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    console.print(
        "wall s: the simulation itself (imports excluded; with workers, their start included); est.: "
        "extrapolated from the measured per-round cost of the rounds finished before the cap. CPU s and "
        "peak MiB: all the run's processes together. Target: 100 x 100 under 30 s; 1000 x 50 under 120 s "
        "on 2 cores."
    )


if __name__ == "__main__":
    main()
