"""Turn a SimulationResult into a JSON report, PNG plots and a summary table.

The JSON report is a pure function of the run: sorted keys, floats rounded to 6 places, virtual
times only (no wall clock, no absolute paths), peers named by index and id. So the same seed
gives byte-identical JSON, which the tests check.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from protocol.games import spec_of
from simulator.plans import HONEST, SimulationResult
from trainer.percentile import percentile

REPORT_VERSION = 1


def _r(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, 6)


def build_report(result: SimulationResult) -> dict[str, Any]:
    scenario = result.scenario
    round_ms = result.round_ms
    plans = result.plans
    honest = [plan for plan in plans if plan.honest]
    byzantine = [plan for plan in plans if not plan.honest]
    honest_ids = {plan.peer_id for plan in honest}
    rounds: list[dict[str, Any]] = []
    stage_count = spec_of(scenario.game).stage_count
    for round_number in range(scenario.rounds):
        # A multi-stage game's round rows describe its answers (stage 0), comparable with the
        # single-stage game's; per-stage counts are in "stages" (below).
        done = [
            record
            for plan in honest
            for record in result.records[plan.peer_id]
            if record.round == round_number and record.completed and record.stage == 0
        ]
        rewards = [record.reward for record in done if record.reward is not None]
        durations = [record.finished_ms - record.opened_ms for record in done]
        present = [plan for plan in honest if plan.present_for(round_number, round_ms)]
        stats = result.stats.get(round_number, Counter())
        rejected: Counter[str] = Counter()
        for record in done:
            rejected.update(record.rejected)
        rounds.append(
            {
                "round": round_number,
                "honest_present": len(present),
                "honest_completed": len(done),
                "reward_mean": _r(statistics.fmean(rewards)) if rewards else None,
                "reward_std": _r(statistics.pstdev(rewards)) if rewards else None,
                "reward_min": _r(min(rewards)) if rewards else None,
                "reward_p10": _r(percentile(rewards, 0.1)) if rewards else None,
                "reward_p90": _r(percentile(rewards, 0.9)) if rewards else None,
                "reward_max": _r(max(rewards)) if rewards else None,
                "rollouts_in_mean": _r(statistics.fmean(r.rollouts_in for r in done)) if done else None,
                "external_peers_trained_on_mean": _r(
                    statistics.fmean(len(r.external_peers_trained_on) for r in done)
                )
                if done
                else None,
                "completion_ms_mean": _r(statistics.fmean(durations)) if durations else None,
                "completion_ms_max": max(durations) if durations else None,
                "messages": stats["gossip_messages"]
                + stats["requests"]
                + stats["dht_puts"]
                + stats["dht_gets"],
                "bytes": stats["gossip_bytes"]
                + stats["request_bytes"]
                + stats["response_bytes"]
                + stats["dht_bytes"],
                "network": dict(sorted(stats.items())),
                "rejected": dict(sorted(rejected.items())),
            }
        )
    _add_held_out_accuracy(result, honest, rounds)
    banned_by_honest: dict[str, int] = {}
    for plan in plans:
        banned_by_honest[plan.peer_id] = sum(
            1 for peer, banned in result.banned_by.items() if peer in honest_ids and plan.peer_id in banned
        )
    peers = []
    for plan in plans:
        records = result.records[plan.peer_id]
        completed = [r for r in records if r.completed and r.stage == 0]
        present_rounds = [r for r in range(scenario.rounds) if plan.present_for(r, round_ms)]
        completed_rounds = _rounds_with_every_stage(records, stage_count)
        peers.append(
            {
                "index": plan.index,
                "peer_id": plan.peer_id,
                "role": plan.role,
                "slow": plan.slow,
                "events": list(plan.events),
                "rounds_present": len(present_rounds),
                "rounds_completed": len(completed) if stage_count == 1 else len(completed_rounds),
                "present_but_not_completed": [r for r in present_rounds if r not in completed_rounds],
                "final_reward": _r(completed[-1].reward)
                if completed and completed[-1].reward is not None
                else None,
                "final_skill": _r(result.skills.get(plan.peer_id)),
                "banned_by_honest_peers": banned_by_honest[plan.peer_id],
            }
        )
    means = [row["reward_mean"] for row in rounds if row["reward_mean"] is not None]
    present_total = sum(p["rounds_present"] for p in peers if p["role"] == HONEST)
    missed_total = sum(len(p["present_but_not_completed"]) for p in peers if p["role"] == HONEST)
    summary = {
        "honest_peers": len(honest),
        "byzantine_peers": len(byzantine),
        "reward_first_round": means[0] if means else None,
        "reward_last_round": means[-1] if means else None,
        "reward_cumulative": _r(sum(means)),
        "honest_rounds_present": present_total,
        "honest_rounds_present_not_completed": missed_total,
        # Honest peers only: a forger trains on its own forged groups every round, which says
        # nothing about verification (the runner's oracle records every peer's).
        "trained_on_invalid_groups": sum(1 for peer, _ in result.invalid_trained if peer in honest_ids),
        "byzantine_banned_by_all_honest": sum(
            1
            for plan in byzantine
            if banned_by_honest[plan.peer_id] == len(result.banned_by.keys() & honest_ids)
        ),
        "honest_banned_by_honest": sum(banned_by_honest[plan.peer_id] for plan in honest),
        "rejections": dict(sorted(result.rejections.items())),
        "messages_total": sum(row["messages"] for row in rounds),
        "bytes_total": sum(row["bytes"] for row in rounds),
        "coordinator_rewards_accepted": len(result.coordinator_log.get("rewards", {})),
        "coordinator_votes_accepted": len(result.coordinator_log.get("winners", {})),
        "coordinator_mismatches": result.coordinator_mismatches,
        "verify_cache_hits": result.cache_hits,
        "verify_cache_misses": result.cache_misses,
        "round_agreement": result.agreement,
    }
    if stage_count > 1:
        summary["stages"] = stage_summary(result, stage_count)
    return {
        "report_version": REPORT_VERSION,
        "scenario": scenario.to_json(),
        "summary": summary,
        "rounds": rounds,
        "peers": peers,
    }


def _add_held_out_accuracy(result: SimulationResult, honest: list[Any], rounds: list[dict[str, Any]]) -> None:
    """`eval_accuracy_mean` per round (honest peers that evaluated in it; None in the others),
    only when some peer evaluated (`simulate --eval-every`): other reports keep their bytes."""
    accuracy: dict[int, list[float]] = {}
    for plan in honest:
        for record in result.records[plan.peer_id]:
            value = (record.eval or {}).get("accuracy")
            if isinstance(value, int | float) and not isinstance(value, bool):
                accuracy.setdefault(record.round, []).append(float(value))
    if not accuracy:
        return
    for row in rounds:
        values = accuracy.get(row["round"])
        row["eval_accuracy_mean"] = _r(statistics.fmean(values)) if values else None


def solo_baseline(result: SimulationResult) -> dict[str, Any]:
    """The mean honest reward per round of a run of the same peers with no external groups
    (`scenario.n_external == 0`: each peer trains on its own questions only), the curve a swarm
    run is compared with in reward.png, the summary and the TensorBoard logs."""
    scenario = result.scenario
    rounds = build_report(result)["rounds"]
    return {
        "n_local": scenario.n_local,
        "n_external": scenario.n_external,
        "rounds": [{"round": row["round"], "reward_mean": row["reward_mean"]} for row in rounds],
    }


def write_tensorboard(result: SimulationResult, report: dict[str, Any], log_dir: Path) -> None:
    """TensorBoard runs under `log_dir`: `peer-<index>-<name>` per honest peer (its rounds as a
    node logs them: reward, loss, KL, grad norm, held-out accuracy when it evaluated) and `swarm`
    (the honest mean, p10 and p90 reward per round, and the solo baseline's mean when run)."""
    from swarmp2p.dashboard.names import peer_name
    from swarmp2p.tblog import TensorBoardLog

    for plan in result.plans:
        if not plan.honest:
            continue
        board = TensorBoardLog(log_dir / f"peer-{plan.index:02d}-{peer_name(plan.peer_id)}")
        for record in result.records[plan.peer_id]:
            if record.completed:
                board.round(record.to_json())
        board.close()
    board = TensorBoardLog(log_dir / "swarm")
    for row in report["rounds"]:
        for key in ("reward_mean", "reward_p10", "reward_p90"):
            board.scalar(f"swarm/{key}", row[key], row["round"])
    for row in (report.get("solo") or {}).get("rounds", []):
        board.scalar("solo/reward_mean", row["reward_mean"], row["round"])
    board.close()


def report_json(report: dict[str, Any]) -> str:
    return json.dumps(report, sort_keys=True, indent=1, allow_nan=False) + "\n"


def write_plots(report: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rounds"]
    x = [row["round"] for row in rows]
    name = report["scenario"]["name"]
    written = []

    def series(key: str) -> list[float]:
        return [math.nan if row[key] is None else row[key] for row in rows]

    learner = "real trainer" if report["scenario"].get("policy") == "trainer" else "simulated learner"
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.fill_between(x, series("reward_min"), series("reward_max"), alpha=0.15, label="min-max")
    ax.fill_between(x, series("reward_p10"), series("reward_p90"), alpha=0.3, label="p10-p90")
    ax.plot(x, series("reward_mean"), label="swarm mean", linewidth=2)
    solo = report.get("solo")
    if solo:  # the same peers training alone: what sharing adds (or costs)
        ax.plot(
            [row["round"] for row in solo["rounds"]],
            [math.nan if row["reward_mean"] is None else row["reward_mean"] for row in solo["rounds"]],
            label=f"solo mean\n({solo['n_local']} local groups,\nno external)",
            color="black",
            linestyle="--",
            linewidth=1.5,
        )
    ax.set(xlabel="round", ylabel="reward (honest peers)", title=f"{name}: reward per round ({learner})")
    ax.margins(y=0.08)  # the axis fits the data: a fixed 0-1 axis flattened 0.05 vs 0.09
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    written.append(_save(fig, out_dir / "reward.png"))

    # Messages and bytes on two panels of their own (a twin axis drew one line over the other
    # and the legend over both), each from zero.
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    top.plot(x, [row["messages"] for row in rows], color="tab:blue", marker=".")
    top.set(ylabel="messages", title=f"{name}: network traffic per round", ylim=(0, None))
    bottom.plot(x, [row["bytes"] / 1e6 for row in rows], color="tab:orange", marker=".")
    bottom.set(xlabel="round", ylabel="MB", ylim=(0, None))
    for axis in (top, bottom):
        axis.grid(alpha=0.3)
    written.append(_save(fig, out_dir / "traffic.png"))

    # Completion time from zero up to the round length: a peer that finishes at the deadline
    # (the max line) is a peer that waited for the stage to end, not a slow one.
    round_s = report["scenario"].get("round_s")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(
        x,
        [math.nan if v is None else v / 1000 for v in series("completion_ms_mean")],
        marker=".",
        label="mean",
    )
    ax.plot(
        x,
        [math.nan if row["completion_ms_max"] is None else row["completion_ms_max"] / 1000 for row in rows],
        marker=".",
        label="slowest peer",
    )
    if isinstance(round_s, int | float):
        ax.axhline(round_s, color="grey", linestyle="--", linewidth=1, label=f"round length ({round_s:g} s)")
        collect = report["scenario"].get("collect_fraction")
        if isinstance(collect, int | float):  # peers train once the collect window closes
            ax.axhline(
                collect * round_s,
                color="grey",
                linestyle=":",
                linewidth=1,
                label=f"collect window ends ({collect * round_s:g} s)",
            )
    ax.set(
        xlabel="round", ylabel="seconds from round start (virtual)", title=f"{name}: round completion time"
    )
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    written.append(_save(fig, out_dir / "completion.png"))
    plt.close("all")
    return written


def _save(fig: Any, path: Path) -> Path:
    from matplotlib.ticker import MaxNLocator

    for axis in fig.axes:  # rounds are whole numbers: no tick at round 0.5
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    return path


def _rounds_with_every_stage(records: list[Any], stage_count: int) -> set[int]:
    stages: dict[int, set[int]] = {}
    for record in records:
        if record.completed:
            stages.setdefault(record.round, set()).add(record.stage)
    return {round_number for round_number, done in stages.items() if len(done) == stage_count}


def stage_summary(result: SimulationResult, stage_count: int) -> list[dict[str, Any]]:
    """Per stage of a multi-stage game, over every honest peer and round: the (round, stage)
    cycles present and completed, the batches published and accepted, the mean reward and
    the rejections, so a reader sees every stage run and what verification turned away."""
    round_ms = result.round_ms
    honest = [plan for plan in result.plans if plan.honest]
    spec = spec_of(result.scenario.game)
    rows = []
    for stage in range(stage_count):
        present = sum(
            1 for plan in honest for r in range(result.scenario.rounds) if plan.present_for(r, round_ms)
        )
        done = [
            record
            for plan in honest
            for record in result.records[plan.peer_id]
            if record.stage == stage and record.completed
        ]
        rewards = [record.reward for record in done if record.reward is not None]
        rejected: Counter[str] = Counter()
        for record in done:
            rejected.update(record.rejected)
        rows.append(
            {
                "stage": stage,
                "name": spec.stage_names[stage] if stage < spec.stage_count else str(stage),
                "trained": spec.plan.trains(stage),
                "honest_present": present,
                "honest_completed": len(done),
                "rounds_completed": len({record.round for record in done}),
                "batches_published": sum(1 for record in done if record.rollouts_out),
                "batches_accepted": sum(len(record.accepted_peers) for record in done),
                "trained_groups": sum(record.trained_local + record.trained_external for record in done),
                "reward_mean": _r(statistics.fmean(rewards)) if rewards else None,
                "rejected": dict(sorted(rejected.items())),
            }
        )
    return rows


def summary_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    summary = report["summary"]
    scenario = report["scenario"]
    rejections = summary["rejections"]
    top = ", ".join(f"{k}={v}" for k, v in sorted(rejections.items(), key=lambda kv: -kv[1])[:6]) or "none"
    return [
        (
            "scenario",
            f"{scenario['name']} (seed {scenario['seed']}"
            + (f", {scenario['workers']} workers)" if scenario.get("workers", 1) > 1 else ")"),
        ),
        (
            "learner",
            "real trainer (tiny model)"
            if scenario.get("policy") == "trainer"
            else "simulated learner (a model of skill; no LM trained)",
        ),
        ("peers", f"{summary['honest_peers']} honest + {summary['byzantine_peers']} byzantine"),
        ("rounds", str(scenario["rounds"])),
        ("reward first -> last round", f"{summary['reward_first_round']} -> {summary['reward_last_round']}"),
        *_solo_rows(report),
        ("cumulative reward", str(summary["reward_cumulative"])),
        (
            "honest rounds completed",
            f"{summary['honest_rounds_present'] - summary['honest_rounds_present_not_completed']}"
            f" / {summary['honest_rounds_present']} present",
        ),
        ("forged groups trained on by honest peers", str(summary["trained_on_invalid_groups"])),
        ("byzantine banned by every honest peer", f"{summary['byzantine_banned_by_all_honest']}"),
        ("messages / bytes", f"{summary['messages_total']} / {summary['bytes_total'] / 1e6:.1f} MB"),
        (
            f"{scenario['coordinator']} coordinator: rewards / votes held",
            f"{summary['coordinator_rewards_accepted']} / {summary['coordinator_votes_accepted']}"
            f" ({summary['coordinator_mismatches']} mismatches)",
        ),
        ("rejections (top)", top),
        *_stage_rows(summary.get("stages", [])),
    ]


def _stage_rows(stages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (
            f"stage {row['stage']} {row['name']}" + (" (trained)" if row["trained"] else ""),
            f"{row['honest_completed']} / {row['honest_present']} completed "
            f"in {row['rounds_completed']} rounds; "
            f"{row['batches_published']} published, {row['batches_accepted']} accepted; "
            f"reward {row['reward_mean']}; rejected {sum(row['rejected'].values())}",
        )
        for row in stages
    ]


def _solo_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    solo = report.get("solo")
    if not solo or not solo["rounds"]:
        return []
    first, last = solo["rounds"][0]["reward_mean"], solo["rounds"][-1]["reward_mean"]
    return [("solo (no sharing): first -> last round", f"{first} -> {last}")]
