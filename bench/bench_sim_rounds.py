"""Simulator cost round by round: CPU seconds, current RSS and live Python blocks after each round.

bench_simulator.py gives whole runs; this shows how a run's cost moves over its rounds (round 0
builds the peers; a heap that keeps growing shows here), and is what A/B comparisons of one
change use: run it from two checkouts in turn (`PYTHONPATH=<other checkout>`), interleaved.

    python bench/bench_sim_rounds.py --peers 1000 --rounds 3
    PYTHONPATH=/tmp/base python bench/bench_sim_rounds.py --peers 1000 --rounds 14
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from procfs import rss_mib
from rich.console import Console
from rich.table import Table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fetch-sample", type=int, default=8)
    args = parser.parse_args()

    from simulator.runner import run_simulation
    from simulator.scenario import Scenario

    table = Table(title=f"{args.peers} peers x {args.rounds} rounds, seed {args.seed}")
    for column in ("round", "CPU s", "RSS MiB", "live blocks (M)"):
        table.add_column(column, justify="right")
    started = last = time.process_time()

    def on_round(round_number: int) -> None:
        nonlocal last
        now = time.process_time()
        table.add_row(
            str(round_number),
            f"{now - last:.2f}",
            f"{rss_mib():.0f}",
            f"{sys.getallocatedblocks() / 1e6:.2f}",
        )
        last = now

    scenario = Scenario(peers=args.peers, rounds=args.rounds, seed=args.seed, fetch_sample=args.fetch_sample)
    run_simulation(scenario, on_round=on_round)
    console = Console()
    console.print(table)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    console.print(f"total CPU {time.process_time() - started:.1f} s, peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
