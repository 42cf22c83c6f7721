"""bench/bench_network.py --netns: the round exchange with every worker in its own network
namespace behind netlab/netns_harness.py's switch (needs root, iproute2 and /dev/net/tun; skipped
with the harness's reason otherwise).

What can break here and not on loopback: a worker that listens or bootstraps on 127.0.0.1 (its
namespace's own loopback) never meets the others, and a launch outside the namespace would skip
the switch and its delay. So: batches arrive, pushed in their announcement (at least one
one-way delay) or fetched (at least one RTT).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from netlab.netns_harness import missing_requirements

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_network

REASON = missing_requirements()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=str(REASON))]

DELAY_MS = 50.0  # one-way on every node's egress: 100 ms RTT


@pytest.mark.parametrize("push_max_bytes", [64 * 1024, 0], ids=["pushed", "fetched"])
def test_round_exchange_crosses_the_delaying_switch(
    push_max_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(bench_network.PUSH_ENV, str(push_max_bytes))  # the workers inherit it
    # No loss: the assertions are about where the bytes go, not about TCP's recovery.
    rows = bench_network.run_netns_config(
        3, [10000], 2, 1.5, "swarm", 0.0,
        delay_ms=DELAY_MS, jitter_ms=0.0, loss=0.0, all_to_all=True, grace_s=10.0,
    )  # fmt: skip
    row = rows[10000]
    assert row["lost"] == 0 and row["crashed"] == 0, row
    one_way_s = DELAY_MS / 1000
    if push_max_bytes:
        # The batch rides in its announcement: one egress, half an RTT, and no fetch at all.
        assert row["p50"] >= one_way_s and row["fetch_errors"] == 0, row
    else:
        # An announcement crosses one egress and a fetch's request and answer two more: every
        # round's time-to-all is at least one RTT, where loopback takes milliseconds.
        assert row["p50"] >= 2 * one_way_s, row
    switch = row["switch"]
    assert switch["forwarded"] > 0 and switch.get("unknown_dst", 0) == 0, switch


def test_host_tcp_settings_stay_inside_the_namespaces() -> None:
    """--host-tcp tunes each namespace's TCP (the route's initial windows, no restart after
    idle) and leaves the machine's own settings as they were; a wrong setting is one clear line."""
    from netlab.netns_harness import SUBNET, NetnsNetwork

    def idle_restart(*place: str) -> str:
        command = [*place, "sysctl", "-n", "net.ipv4.tcp_slow_start_after_idle"]
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()

    before = idle_restart()
    with NetnsNetwork(2) as network:
        network.tune_tcp(**bench_network.host_tcp_options("initcwnd=40,no-idle-restart"))
        for index in range(2):
            assert idle_restart(*network.exec_args(index)) == "0"
            routes = subprocess.run(
                ["ip", "-n", network.namespaces[index], "route", "show", f"{SUBNET}.0/24"],
                check=True, capture_output=True, text=True,
            ).stdout  # fmt: skip
            assert "initcwnd 40" in routes and "initrwnd 40" in routes, routes
    assert idle_restart() == before
    with pytest.raises(SystemExit, match="initcwnd=N"):
        bench_network.host_tcp_options("initcwnd=lots")


def test_the_tcp_floor_runs_on_loopback_and_across_the_switch() -> None:
    """bench/tcp_floor.py, the bare TCP exchange `--tcp-floor` puts beside ours: every batch
    arrives, and in the namespaces no round beats one one-way delay (it crossed the switch)."""
    import tcp_floor

    from netlab.netns_harness import NetnsNetwork

    loopback = tcp_floor.run_floor(3, [10000, 200000], 2, 1.0)
    with NetnsNetwork(3) as network:
        network.impair(delay_ms=DELAY_MS)
        netns = tcp_floor.run_floor(3, [10000, 200000], 2, 1.0, network=network)
        forwarded = sum(s["forwarded"] for s in network.stats())
    for size in (10000, 200000):
        assert loopback[size]["lost"] == 0 and netns[size]["lost"] == 0
        assert len(netns[size]["rounds"]) == 2 and min(netns[size]["rounds"]) >= DELAY_MS / 1000, netns
        assert max(loopback[size]["rounds"]) < DELAY_MS / 1000, loopback
    assert forwarded >= 2 * 6 * 200000 // 1500, forwarded  # every 200 KB batch went through it


def test_the_comparison_table_shows_the_tcp_floor_beside_ours() -> None:
    side = {"p50": 0.2, "p99": 0.3, "lost": 0, "fetch_errors": 0, "gossip_p99": 0.1}
    netns = {**side, "p99": 0.9, "switch": {"forwarded": 10}, "switch_cpu_s": 0.5}
    floor = {"loopback": {"p99": 0.01}, "netns": {"p99": 0.61}}
    row = {"procs": 5, "size": 1_000_000, "load": "0.1–0.2", "loopback": side, "netns": netns, "floor": floor}
    header, _, line = bench_network.compare_table([row], 0.1, 4.0).splitlines()
    assert header.endswith("| ours − floor (netns p99), RTTs |")
    # Ours is 6 RTT above loopback; bare TCP was 6 above its own; ours is 2.9 above bare TCP's.
    assert line.endswith("| 0.010 / 0.610 | 6.0 | +2.9 |"), line
