"""bench_network.py's figures: the workers' result files summarized per batch size and per
exchange, and the tables printed from them."""

from __future__ import annotations

import math
import statistics
from typing import Any

from swarmp2p.net.counters import DropCounters
from trainer.percentile import percentile


def per_round(
    results: list[dict[str, Any] | None], exchanges: int, start: float, interval: float, *, all_to_all: bool
) -> list[dict[str, Any]]:
    """Per exchange (--per-round): until every process held every batch (inf: some never
    arrived), and summed over the processes that reported, the duplicates they received and the
    CPU they spent from this exchange's start to the next one's (the last: to the end of the
    run), with the fewest and most connections a process had when it began. Workers without
    `round_marks` (hivemind's) leave those None.
    `median_s` / `p90_s`: half / 90% of the round's deliveries (one batch reaching one
    process) had arrived by then, from the round's start; against `took_s` they say whether a
    slow round was slow throughout or waited for a few stragglers (a lost packet, one busy
    process)."""
    procs = len(results)
    fanin = procs if all_to_all else 1
    alive = [r for r in results if r is not None]
    marked = [r["round_marks"] for r in alive if len(r.get("round_marks", ())) == exchanges + 1]
    rows = []
    for exchange in range(exchanges):
        done: list[float] = []
        complete = True
        for msg_id in range(exchange * fanin, (exchange + 1) * fanin):
            for index, result in enumerate(results):
                if result is None or str(msg_id) in result["published"]:
                    continue
                if all_to_all and msg_id % procs == index:
                    continue
                t = result["received"].get(str(msg_id))
                if t is None:
                    complete = False
                else:
                    done.append(t)
        scheduled = start + exchange * interval
        delays = sorted(t - scheduled for t in done)
        rows.append(
            {
                "took_s": max(done) - scheduled if complete and done else float("inf"),
                "median_s": percentile(delays, 0.5),
                "p90_s": percentile(delays, 0.9),
                "duplicates": sum(m[exchange + 1][1] - m[exchange][1] for m in marked) if marked else None,
                "cpu_s": sum(m[exchange + 1][0] - m[exchange][0] for m in marked) if marked else None,
                "connections": (min(m[exchange][2] for m in marked), max(m[exchange][2] for m in marked))
                if marked
                else None,
            }
        )
    return rows


def summarize(
    results: list[dict[str, Any] | None],
    sizes: list[int],
    messages: int,
    start: float,
    interval: float,
    *,
    all_to_all: bool = False,
    idle_s: float = 0.0,
) -> dict[int, dict[str, Any]]:
    """Per batch size: latency percentiles, losses, errors and CPU from the workers' results.

    Without `all_to_all` one exchange is one publisher's batch and its latency runs from that
    publish until the last process holds it. With it, one exchange is a round in which every
    process publishes, and its latency runs from the round's scheduled start until every
    process holds every other process's batch; a round in which any batch never arrived has
    no such time and counts as infinite (so p99 says so).
    """
    procs = len(results)
    # A worker that wrote no result, or one it did not mark finished (hivemind's worker saves
    # after every round), crashed; the rounds it did report still count.
    crashed = sum(1 for r in results if r is None or not r.get("finished", True))
    alive = [r for r in results if r is not None]
    fanin = procs if all_to_all else 1
    published: dict[int, float] = {}
    for result in alive:
        published.update({int(k): v for k, v in result["published"].items()})
    reasons: dict[str, int] = {}
    drop_kinds: dict[str, int] = {}
    for result in alive:
        for reason, count in result["errors"].items():
            reasons[reason] = reasons.get(reason, 0) + count
        for kind, count in result["drops"].items():
            drop_kinds[kind] = drop_kinds.get(kind, 0) + count
    rows: dict[int, dict[str, Any]] = {}
    for s_index, size in enumerate(sizes):
        latencies, gossip, lost = [], [], 0
        for exchange in range(s_index * messages, (s_index + 1) * messages):
            ids = range(exchange * fanin, (exchange + 1) * fanin)
            round_done: list[float] = []
            complete = True
            for msg_id in ids:
                done, heard = [], []
                for index, result in enumerate(results):
                    if all_to_all and msg_id % procs == index:
                        continue  # its own batch
                    if result is None:
                        lost += 1  # a crashed process holds nothing
                        complete = False
                        continue
                    if str(msg_id) in result["published"]:
                        continue
                    t = result["received"].get(str(msg_id))
                    if t is None:
                        lost += 1
                        complete = False
                    else:
                        done.append(t)
                    h = result["heard"].get(str(msg_id))
                    if h is not None:
                        heard.append(h)
                round_done += done
                if not all_to_all and msg_id in published and done:
                    latencies.append(max(done) - published[msg_id])
                if not all_to_all and msg_id in published and heard:
                    gossip.append(max(heard) - published[msg_id])
                if all_to_all and heard:
                    gossip.append(max(heard) - (start + exchange * interval))
            if all_to_all:
                scheduled = start + exchange * interval
                latencies.append(max(round_done) - scheduled if complete and round_done else float("inf"))
        latencies.sort()
        gossip.sort()
        rows[size] = {
            "p50": statistics.median(latencies) if latencies else float("nan"),
            "p99": percentile(latencies, 0.99),
            # Until the LAST process heard the announcement: the gossip share of the latency.
            "gossip_p99": percentile(gossip, 0.99),
            "fetch_errors": sum(sum(r["errors"].values()) for r in alive),
            "error_reasons": reasons,
            "drop_kinds": drop_kinds,
            "lost": lost,
            "crashed": crashed,
            "cpu_s": mean([cpu_share(r, s_index, len(sizes)) for r in alive]),
            # Normalised to `idle_s`: workers see the start file at slightly different times.
            "idle_cpu_s": mean([r["idle_cpu_s"] / r["idle_s"] for r in alive]) * idle_s,
            # Message drops only: failed dials and re-dials are connection churn, not lost data.
            "drops": sum(
                v for r in alive for k, v in r["drops"].items() if k not in DropCounters.NOT_DATA_LOSS
            ),
            "dial_failed": sum(r["drops"].get("dial_failed", 0) for r in alive),
            # Processes whose relays had not settled when they said ready (wait_for_relays);
            # hivemind's workers have no such wait and report none.
            "unsettled": sum(1 for r in alive if not r.get("relays_settled", True)),
        }
    return rows


def mean(values: list[float]) -> float:
    return statistics.mean(values) if values else float("nan")


def cpu_share(result: dict[str, Any], s_index: int, n_sizes: int) -> float:
    """CPU seconds one process spent on one batch size (an even split when not measured per size)."""
    by_size = result.get("cpu_by_size")
    if by_size and len(by_size) == n_sizes:
        return float(by_size[s_index])
    return float(result["cpu_s"]) / n_sizes


def fmt_s(value: float) -> str:
    return "never" if math.isinf(value) else f"{value:.3f}"


def compare_table(results: list[dict[str, Any]], rtt_s: float, within_rtts: float) -> str:
    """One markdown row per (procs, batch): loopback vs namespaces, the p99 difference in RTTs.

    The switch's counters and CPU are per swarm (all sizes together), repeated on each size's row.
    """
    lines = [
        "| procs | batch | loopback p50 s | loopback p99 s | netns p50 s | netns p99 s | netns gossip p99 s "
        f"| p99 netns − loopback s | in RTTs | within {within_rtts:g} RTT | lost loopback / netns "
        "| fetch errors loopback / netns | switch: packets lost / sent | switch: late > 1 ms, latest ms "
        "| switch CPU s | load avg |",
        "|---" * 16 + "|",
    ]
    if any("floor" in r for r in results):
        # The bare TCP exchange on the same two networks (bench/tcp_floor.py): what TCP alone costs.
        lines[0] += " TCP floor p99 loopback / netns s | TCP floor netns − loopback, RTTs"
        lines[0] += " | ours − floor (netns p99), RTTs |"
        lines[1] += "---|---|---|"
    for r in results:
        lo, ns = r["loopback"], r["netns"]
        diff = ns["p99"] - lo["p99"]
        rtts = diff / rtt_s
        switch = ns["switch"]
        sent = switch.get("forwarded", 0) + switch.get("dropped_loss", 0)
        cells = [
            str(r["procs"]),
            f"{r['size'] / 1000:g} KB",
            fmt_s(lo["p50"]),
            fmt_s(lo["p99"]),
            fmt_s(ns["p50"]),
            fmt_s(ns["p99"]),
            # Until the last process heard the last announcement: the rest is fetching.
            fmt_s(ns["gossip_p99"]),
            fmt_s(diff),
            "never" if math.isinf(rtts) else f"{rtts:.1f}",
            "yes" if rtts <= within_rtts else "**no**",
            f"{lo['lost']} / {ns['lost']}",
            f"{lo['fetch_errors']} / {ns['fetch_errors']}",
            f"{switch.get('dropped_loss', 0)} / {sent}",
            # Deliveries the switch made late (it waited for the CPU), and its scheduling.
            f"{switch.get('late_over_1ms', 0)}, {switch.get('late_max_us', 0) / 1000:.1f} "
            f"({ns.get('switch_scheduling', '?')})",
            f"{ns['switch_cpu_s']:.1f}",
            r["load"],
        ]
        if "floor" in r:
            floor_lo, floor_ns = r["floor"]["loopback"]["p99"], r["floor"]["netns"]["p99"]
            cells += [
                f"{fmt_s(floor_lo)} / {fmt_s(floor_ns)}",
                f"{(floor_ns - floor_lo) / rtt_s:.1f}",
                f"{(ns['p99'] - floor_ns) / rtt_s:+.1f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def round_table(procs: int, manager: str, rows: dict[int, dict[str, Any]]) -> Any:
    """--per-round: one line per exchange (see `per_round`)."""
    from rich.table import Table

    table = Table(title=f"{procs} procs {manager}, per exchange (CPU and duplicates: all processes)")
    columns = ("exchange", "batch", "half delivered s", "90% s", "took s", "duplicates received", "CPU s")
    for column in (*columns, "connections per process"):
        table.add_column(column, justify="right")
    number = 0
    for size, row in rows.items():
        for exchange in row["rounds"]:
            number += 1
            conns = exchange["connections"]
            table.add_row(
                str(number),
                f"{size / 1000:g} KB",
                f"{exchange['median_s']:.3f}",
                f"{exchange['p90_s']:.3f}",
                f"{exchange['took_s']:.3f}",
                "-" if exchange["duplicates"] is None else str(exchange["duplicates"]),
                "-" if exchange["cpu_s"] is None else f"{exchange['cpu_s']:.2f}",
                "-" if conns is None else f"{conns[0]}-{conns[1]}",
            )
    return table


def ratio(value: float, baseline: float) -> str:
    # `--idle 0` measures no idle CPU: a zero baseline has no ratio.
    return f"{value / baseline:.2f}x" if baseline else "-"
