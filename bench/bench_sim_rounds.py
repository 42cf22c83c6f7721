"""Simulator cost round by round: CPU seconds, current RSS and live Python blocks after each round.

bench_simulator.py gives whole runs; this shows how a run's cost moves over its rounds (round 0
builds the peers; a heap that keeps growing shows here), and is what A/B comparisons of one
change use: run it from two checkouts in turn (`PYTHONPATH=<other checkout>`), interleaved.

    python bench/bench_sim_rounds.py --peers 1000 --rounds 3
    PYTHONPATH=/tmp/base python bench/bench_sim_rounds.py --peers 1000 --rounds 14
    python bench/bench_sim_rounds.py --peers 3000 --rounds 2 --time-delivery

`--time-delivery` also times gossip delivery (`simulator.fastpath.delivery`, the N x N part
of a round: every announcement to every peer) per round: the deliveries, their seconds and the
cost of one; the rest of the round's CPU is everything else.
"""

from __future__ import annotations

import argparse
import sys
import time

from procfs import peak_rss_mib, rss_mib
from rich.console import Console
from rich.table import Table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fetch-sample", type=int, default=8)
    parser.add_argument(
        "--time-delivery", action="store_true", help="also time gossip delivery per round (count, s, us each)"
    )
    args = parser.parse_args()

    from simulator.runner import run_simulation
    from simulator.scenario import Scenario

    delivery = _DeliveryTimer() if args.time_delivery else None

    table = Table(title=f"{args.peers} peers x {args.rounds} rounds, seed {args.seed}")
    columns = ["round", "CPU s", "RSS MiB", "live blocks (M)"]
    if delivery is not None:
        columns += ["deliveries", "delivery CPU s", "us / delivery"]
    for column in columns:
        table.add_column(column, justify="right")
    started = last = time.process_time()

    def on_round(round_number: int) -> None:
        nonlocal last
        now = time.process_time()
        blocks = sys.getallocatedblocks() / 1e6
        cells = [str(round_number), f"{now - last:.2f}", f"{rss_mib():.0f}", f"{blocks:.2f}"]
        if delivery is not None:
            count, seconds = delivery.take()
            cells += [str(count), f"{seconds:.2f}", f"{1e6 * seconds / max(1, count):.2f}"]
        table.add_row(*cells)
        last = now

    scenario = Scenario(peers=args.peers, rounds=args.rounds, seed=args.seed, fetch_sample=args.fetch_sample)
    try:
        run_simulation(scenario, on_round=on_round)
    finally:
        if delivery is not None:
            delivery.remove()
    console = Console()
    console.print(table)
    peak = peak_rss_mib()  # this process's own (ru_maxrss would carry its launcher's over)
    console.print(f"total CPU {time.process_time() - started:.1f} s, peak RSS {peak:.0f} MiB")


class _DeliveryTimer:
    """Wraps `simulator.fastpath.delivery.handle_announcement_many` (what the simulated network
    calls with an instant's gossip for many receivers) with a CPU-time counter, until `remove`."""

    def __init__(self) -> None:
        from simulator.fastpath import delivery

        self._delivery = delivery
        self._original = inner = delivery.handle_announcement_many
        self.count = 0
        self.seconds = 0.0

        def timed(deliveries: list) -> None:  # type: ignore[type-arg]
            started = time.process_time()
            try:
                inner(deliveries)
            finally:
                self.seconds += time.process_time() - started
                self.count += sum(len(messages) for _, messages in deliveries)

        delivery.handle_announcement_many = timed

    def take(self) -> tuple[int, float]:
        """Deliveries and CPU seconds since the last take."""
        taken = (self.count, self.seconds)
        self.count, self.seconds = 0, 0.0
        return taken

    def remove(self) -> None:
        self._delivery.handle_announcement_many = self._original


if __name__ == "__main__":
    main()
