"""bench/bench_simulator.py reports each round as it finishes (the progress bar and `--events`),
and a size stopped at its cap still gets a row from the rounds it finished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import bench_simulator  # noqa: E402


def test_every_round_is_reported_while_the_run_goes_on() -> None:
    seen: list[dict] = []
    measured = bench_simulator.run_size(6, 3, 0, cap_s=300, on_event=seen.append)
    assert [e["event"] for e in seen] == ["start", "round", "round", "round", "done"]
    assert [e["round"] for e in seen if e["event"] == "round"] == [0, 1, 2]
    assert all(e["rss_now_mib"] > 0 for e in seen if e["event"] == "round")  # the child, measured
    assert not measured["capped"] and measured["rounds_done"] == 3 and measured["peak_mib"] > 0


def test_a_size_stopped_at_its_cap_keeps_the_rounds_it_finished() -> None:
    seen: list[dict] = []
    measured = bench_simulator.run_size(40, 10_000, 0, cap_s=8, on_event=seen.append)
    rounds = [e["round"] for e in seen if e["event"] == "round"]
    assert measured["capped"] and "done" not in [e["event"] for e in seen]
    assert measured["rounds_done"] == len(rounds) >= 1  # every round it finished was reported
    assert rounds == list(range(len(rounds)))


def test_the_events_file_holds_each_round_as_it_finished(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    subprocess.run(
        [sys.executable, str(BENCH / "bench_simulator.py"), "--sizes", "6x2,5x2", "--events", str(events)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert [(e["peers"], e["event"], e.get("round")) for e in lines] == [
        (6, "start", None),
        (6, "round", 0),
        (6, "round", 1),
        (6, "done", None),
        (5, "start", None),
        (5, "round", 0),
        (5, "round", 1),
        (5, "done", None),
    ]


def test_bench_sim_rounds_times_the_deliveries_of_each_round() -> None:
    """`--time-delivery`: every peer hears every other peer's announcement once a round, so a
    round of N peers that all stay online delivers N x (N - 1) messages; the timer is removed
    afterwards."""
    command = [sys.executable, str(BENCH / "bench_sim_rounds.py"), "--time-delivery"]
    done = subprocess.run(
        [*command, "--peers", "12", "--rounds", "2"],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    rows = [line.split("│") for line in done.stdout.splitlines() if line.count("│") >= 8]
    cells = [[cell.strip() for cell in row[1:-1]] for row in rows]
    body = [row for row in cells if row[0].isdigit()]
    assert [row[0] for row in body] == ["0", "1"]
    assert [int(row[4]) for row in body] == [12 * 11, 12 * 11]
    assert all(float(row[5]) >= 0 and float(row[6]) > 0 for row in body)


def test_a_runs_peak_memory_is_its_own_not_its_launchers() -> None:
    """Linux's ru_maxrss survives fork and exec: a child started by a big process (a pytest
    worker, ~870 MiB in CI) reported its launcher's peak as its own. The child's own high-water
    mark (VmHWM) does not."""
    ballast = b"\x01" * (600 * 2**20)  # written, so resident
    measured = bench_simulator.run_size(6, 2, 0, cap_s=300)
    del ballast
    assert measured["peak_mib"] < 400


def test_a_size_over_two_workers_counts_all_of_its_processes() -> None:
    """`--workers 2`: the run's CPU and memory are its three processes' (the parent and two
    workers), not the parent's alone."""
    alone = bench_simulator.run_size(60, 4, 0, cap_s=300)
    spread = bench_simulator.run_size(60, 4, 0, cap_s=300, workers=2)
    assert (alone["workers"], spread["workers"]) == (1, 2)
    assert not spread["capped"] and spread["rounds_done"] == 4
    assert spread["peak_mib"] > 2 * alone["peak_mib"]  # three interpreters, each about one's size
    assert spread["cpu_s"] > alone["cpu_s"]  # the workers' CPU counted too
