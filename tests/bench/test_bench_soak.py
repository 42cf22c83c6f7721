"""bench/bench_soak.py's arithmetic: what it calls flat, and what it reads from /proc.

The soak itself runs for an hour (a bench, not a test); its verdict comes from these functions.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import bench_soak  # noqa: E402


def _rows(node: int, rss: list[float]) -> list[dict]:
    return [
        {"node": node, "minute": float(minute), "rss_mib": value, "cpu_pct": 10.0, "rounds": minute}
        for minute, value in enumerate(rss)
    ]


def test_growth_after_the_warm_up_is_not_flat_and_a_warm_up_climb_does_not_count() -> None:
    # Node 1 climbs during a 5-minute warm-up, then holds with noise; node 2 leaks 1 MiB a minute.
    settled = [500.0 + (3.0 if minute % 2 else -3.0) for minute in range(25)]
    rows = _rows(1, [300, 350, 400, 450, 480, *settled]) + _rows(2, [400.0 + m for m in range(30)])
    summary = bench_soak.summarize(rows, warmup_min=5, flat_growth_mib=10)
    assert summary[1]["flat"] and abs(summary[1]["rss_growth_mib"]) < 1
    assert (summary[1]["rss_min_mib"], summary[1]["rss_max_mib"]) == (497, 503)
    assert not summary[2]["flat"] and summary[2]["rss_growth_mib"] == 17  # thirds of 8 samples, 17 min apart
    assert round(summary[2]["rss_slope_mib_per_hour"]) == 60
    assert summary[2]["rss_after_warmup_mib"] == 405 and summary[2]["rss_end_mib"] == 429
    assert summary[1]["rounds"] == 29


def test_memory_that_falls_is_flat() -> None:
    rows = _rows(1, [600.0 - 2 * minute for minute in range(30)])
    assert bench_soak.summarize(rows, warmup_min=0, flat_growth_mib=10)[1]["flat"]


def test_a_slope_needs_two_points() -> None:
    assert bench_soak.slope_per_hour([]) == bench_soak.slope_per_hour([(1.0, 5.0)]) == 0.0
    assert bench_soak.slope_per_hour([(0.0, 0.0), (30.0, 10.0)]) == 20.0


def test_sample_process_reads_memory_and_cpu_of_a_live_process_and_none_of_a_gone_one() -> None:
    sample = bench_soak.sample_process(os.getpid())
    assert sample is not None
    rss_mib, cpu_s = sample
    assert rss_mib > 10 and cpu_s > 0
    assert bench_soak.sample_process(2**22 + 12345) is None  # above pid_max's default: no such process


def _chain_rows(node: int, rss: list[float], failed_every: int = 0) -> list[dict]:
    return [
        {
            "node": node,
            "round": 10 * sample,
            "rss_mib": value,
            "cpu_pct": 20.0,
            "fds": 14,
            "gas_per_round": 150_000,
            "failed_submissions": sample // failed_every if failed_every else 0,
            "rounds_completed": 10 * sample,
        }
        for sample, value in enumerate(rss)
    ]


def test_chain_soak_slopes_are_per_1000_rounds_after_the_warm_up() -> None:
    import bench_chain_soak

    # Node 1 climbs for 5 samples (50 rounds) then holds; node 2 leaks 1 MiB a round and fails
    # one submission every 4 samples (40 rounds).
    rows = _chain_rows(1, [300, 350, 400, 450, 480] + [500.0] * 20) + _chain_rows(
        2, [400.0 + 10 * s for s in range(25)], failed_every=4
    )
    summary = bench_chain_soak.summarize(rows, warmup_rounds=50)
    assert summary[1]["rss_mib_per_1000"] == 0 and summary[1]["rounds_reached"] == 240
    assert round(summary[2]["rss_mib_per_1000"]) == 1000
    assert 20 <= summary[2]["failed_submissions_per_1000"] <= 30
    assert summary[1]["fds_per_1000"] == summary[1]["gas_per_round_per_1000"] == 0
    assert round(summary[1]["rounds_completed_per_1000"]) == 1000  # one round trained per round
    assert (summary[2]["rss_mib_min"], summary[2]["rss_mib_max"]) == (450, 640)


def test_chain_soak_counts_open_file_descriptors() -> None:
    import bench_chain_soak

    before = bench_chain_soak.open_fds(os.getpid())
    with open(__file__) as _, open(__file__) as _:
        assert bench_chain_soak.open_fds(os.getpid()) == before + 2
    assert bench_chain_soak.open_fds(2**22 + 12345) == 0
    assert bench_chain_soak.slope_per_1000([(5.0, 1.0)]) == 0.0
    assert bench_chain_soak.slope_per_1000([(0.0, 0.0), (500.0, 2.0)]) == 4.0


def test_the_flood_targets_every_node_on_its_swarm_and_restarts_when_it_ends(tmp_path: Path) -> None:
    import soak_flood

    infos = [
        {"listen_addrs": [f"/ip4/127.0.0.1/tcp/{port}/p2p/id{port}"], "schedule": {"swarm_id": "chain-ab"}}
        for port in (4001, 4002)
    ]
    flood = soak_flood.Flood(infos, 4.0, 1000.5, tmp_path / "attack.log")
    args = flood.args[flood.args.index("flood") + 1 :]
    flags = dict(zip(args[3::2], args[4::2], strict=False))
    assert args[:3] == [
        "--targets",
        "/ip4/127.0.0.1/tcp/4001/p2p/id4001",
        "/ip4/127.0.0.1/tcp/4002/p2p/id4002",
    ]
    assert (
        flags["--swarm"] == "chain-ab" and flags["--round-ms"] == "4000" and flags["--genesis"] == "1000.500"
    )
    flood.args = [sys.executable, "-c", "import time; time.sleep(30)"]  # the attacker's lifetime only
    try:
        flood.keep_running()
        first = flood.process
        flood.keep_running()
        assert flood.process is first and flood.runs == 1
        assert first is not None
        first.kill()
        first.wait()
        flood.keep_running()
        assert flood.process is not first and flood.runs == 2
    finally:
        flood.stop()
    assert flood.process is not None and flood.process.poll() is not None


def test_the_round_tally_reads_on_from_where_it_stopped_and_waits_for_a_half_written_line(
    tmp_path: Path,
) -> None:
    rounds = tmp_path / "rounds.jsonl"
    tally = bench_soak.RoundTally(rounds)
    tally.read()  # no file yet: nothing counted
    assert (tally.played, tally.last_round) == (0, -1)

    def line(round_number: int, fate: str, trained: int, drops: int) -> str:
        record = {
            "round": round_number,
            "fate": fate,
            "completed": fate == "completed",
            "trained_local": trained,
            "trained_external": 0,
            "rejected": {"late": 2, "banned": 1},
            "network_drops": {"dial_failed": drops, "gossip_bad_signature": 2 * drops},
        }
        return json.dumps(record) + "\n"

    rounds.write_text(line(4, "completed", 2, 10) + line(5, "skipped", 0, 20))
    tally.read()
    whole = line(6, "trained_report_late", 1, 30)
    with rounds.open("a") as handle:
        handle.write(whole[:25])  # the node is still writing this line
    tally.read()
    assert (tally.played, tally.completed, tally.trained, tally.last_round) == (2, 1, 1, 5)
    assert tally.rejected == 6 and tally.drops == 60  # drops: the last line's running totals
    with rounds.open("a") as handle:
        handle.write(whole[25:])
    tally.read()
    assert (tally.played, tally.trained, tally.last_round, tally.drops) == (3, 2, 6, 90)
    assert tally.fates == {"completed": 1, "skipped": 1, "trained_report_late": 1}
    assert tally.rejected == 9
    assert bench_soak.rounds_completed(rounds) == 1


def test_the_soak_counts_open_file_descriptors_and_threads() -> None:
    before = bench_soak.open_fds(os.getpid())
    with open(__file__) as _, open(__file__) as _:
        assert bench_soak.open_fds(os.getpid()) == before + 2
    assert bench_soak.threads(os.getpid()) >= 1
    assert bench_soak.open_fds(2**22 + 12345) == bench_soak.threads(2**22 + 12345) == 0


def _full_rows(node: int, fds: list[int]) -> list[dict]:
    """A sample a minute, two swarm rounds a minute; a node that plays every round and sees
    100 drops a round."""
    return [
        {
            "node": node,
            "minute": float(minute),
            "round": 2 * minute,
            "rss_mib": 500.0,
            "cpu_pct": 30.0,
            "fds": value,
            "threads": 6,
            "rounds": 2 * minute,
            "played": 2 * minute,
            "trained": minute,
            "rejected": 0,
            "drops": 200 * minute,
            "fates": {"completed": 2 * minute},
            "load1": 3.0,
        }
        for minute, value in enumerate(fds)
    ]


def test_slopes_per_1000_rounds_tell_a_leak_from_a_counter_that_keeps_pace(tmp_path: Path) -> None:
    # Node 1's fds hold at 20 after the warm-up; node 2 leaks one fd a round.
    rows = _full_rows(1, [10, 15] + [20] * 28) + _full_rows(2, [20 + 2 * m for m in range(30)])
    summary = bench_soak.summarize(rows, warmup_min=2, flat_growth_mib=50)
    assert summary[1]["fds_per_1000_rounds"] == 0
    assert (summary[1]["fds_min"], summary[1]["fds_max"]) == (20, 20)
    assert round(summary[2]["fds_per_1000_rounds"]) == 1000 and round(summary[2]["fds_per_hour"]) == 120
    assert round(summary[1]["played_per_1000_rounds"]) == 1000  # every round played
    assert round(summary[1]["trained_per_1000_rounds"]) == 500
    assert round(summary[1]["drops_per_1000_rounds"]) == 100_000
    assert summary[1]["rss_mib_per_1000_rounds"] == 0 and summary[1]["swarm_round"] == 58
    assert summary[2]["fates"] == {"completed": 58}
    assert "completed 116" in bench_soak.fates_line(summary)
    assert bench_soak.slope_per_1000([(5.0, 1.0)]) == 0.0
    assert bench_soak.slope_per_1000([(0.0, 0.0), (500.0, 2.0)]) == 4.0
    bench_soak.plot(tmp_path / "soak.png", rows, warmup_min=2)
    assert (tmp_path / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_wait_between_samples_restarts_an_attacker_run_that_ended(monkeypatch: Any) -> None:
    class CountingFlood:
        """Flood.keep_running (tested above) restarts a run that ended; here: how often the
        wait asks it to."""

        checks = 0

        def keep_running(self) -> None:
            self.checks += 1

    flood = CountingFlood()
    monkeypatch.setattr(bench_soak, "FLOOD_CHECK_S", 0.2)
    bench_soak.wait_keeping_the_flood(2.0, flood)  # type: ignore[arg-type]
    assert flood.checks >= 3  # within one sample's wait, not once a sample
    bench_soak.wait_keeping_the_flood(0.0, None)  # no flood: just the wait
