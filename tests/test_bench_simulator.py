"""bench/bench_simulator.py reports each round as it finishes (the progress bar and `--events`),
and a size stopped at its cap still gets a row from the rounds it finished."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
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
