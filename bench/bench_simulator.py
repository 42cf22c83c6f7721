"""Simulator speed: wall time and peak memory for N peers x R rounds, printed as a table.

Each size runs in a fresh subprocess so that peak RSS is that run's own. The baseline row is the
smallest size, and the ratio columns compare against it measured in the same invocation.

    python bench/bench_simulator.py                       # 100 / 300 / 1000 peers x 50 rounds
    python bench/bench_simulator.py --sizes 100x100 --fetch-sample 0
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

CHILD = """
import json, resource, sys, time
from simulator.runner import run_simulation
from simulator.scenario import Scenario
peers, rounds, sample = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
start = time.perf_counter()
result = run_simulation(Scenario(peers=peers, rounds=rounds, seed=1, fetch_sample=sample))
wall = time.perf_counter() - start
completed = sum(1 for records in result.records.values() for r in records if r.completed)
print(json.dumps({"wall_s": wall, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "completed": completed}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100x50,300x50,1000x50", help="comma-separated PEERSxROUNDS")
    parser.add_argument(
        "--fetch-sample", type=int, default=8, help="batches verified per peer-round (0 = all)"
    )
    args = parser.parse_args()
    console = Console()
    rows = []
    for size in args.sizes.split(","):
        peers, rounds = (int(part) for part in size.split("x"))
        console.print(f"running {peers} peers x {rounds} rounds ...")
        started = time.perf_counter()
        output = subprocess.run(
            [sys.executable, "-c", CHILD, str(peers), str(rounds), str(args.fetch_sample)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        measured = json.loads(output.strip().splitlines()[-1])
        measured["process_s"] = time.perf_counter() - started
        rows.append((peers, rounds, measured))
    base = rows[0][2]
    table = Table(title=f"simulator: wall time and peak memory (fetch_sample={args.fetch_sample})")
    for column in (
        "peers",
        "rounds",
        "wall s",
        "peer-rounds/s",
        "peak MiB",
        "wall x base",
        "peer-rounds x base",
    ):
        table.add_column(column, justify="right")
    base_work = rows[0][0] * rows[0][1]
    for peers, rounds, measured in rows:
        work = peers * rounds
        table.add_row(
            str(peers),
            str(rounds),
            f"{measured['wall_s']:.1f}",
            f"{measured['completed'] / measured['wall_s']:.0f}",
            f"{measured['peak_mib']:.0f}",
            f"{measured['wall_s'] / base['wall_s']:.2f}",
            f"{work / base_work:.1f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
