"""What the page draws, computed from a normalized status: series for the charts, the tables'
rows, friendly names. A pure function (`build_view`), so the page stays a thin renderer and
what it shows is tested here, without a browser.

Every part is optional in the status: a node's status has history records with per-reason
rejections and training metrics; a simulation report's (swarmp2p/dashboard/sources.py) has
per-round means and bands, a leaderboard and a summary; an experiment's has one reward series
per arm.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping
from typing import Any

from swarmp2p.dashboard.names import peer_name
from swarmp2p.dashboard.status import is_number

TRAIN_METRICS = (
    ("loss", "loss"),
    ("kl", "KL"),
    ("grad_norm", "grad norm"),
    ("clip_fraction", "clip fraction"),
    ("tokens_per_s", "tokens / s (training)"),
)
_ROUNDS_SHOWN = 30
_FEED_SHOWN = 24
_LEADERBOARD_SHOWN = 25
_RECENT = 10  # rounds a leaderboard's recent mean reward covers


def rejected_total(value: Any) -> int | None:
    """A record's rejections: a node's are per reason, a report's may be a total already."""
    if isinstance(value, Mapping):
        return int(sum(v for v in value.values() if is_number(v)))
    return int(value) if is_number(value) else None


def _series(label: str, points: list[list[float]], **extra: Any) -> dict[str, Any]:
    return {"label": label, "points": points, **extra}


def _reward_series(status: Mapping[str, Any], history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    given = status.get("reward_series")
    if isinstance(given, list):
        return [row for row in given if isinstance(row, dict) and isinstance(row.get("points"), list)]
    points = [
        [row["round"], row["reward"]]
        for row in history
        if is_number(row.get("round")) and is_number(row.get("reward"))
    ]
    band = [
        [row["round"], row["reward_min"], row["reward_max"]]
        for row in history
        if all(is_number(row.get(key)) for key in ("round", "reward_min", "reward_max"))
    ]
    label = "mean reward (honest peers)" if band else "reward (own completions)"
    if not points:
        return []
    series = [_series(label, points, band=band, band_label="min–max")]
    solo = status.get("solo")  # a simulation's baseline: the same peers with no external groups
    if isinstance(solo, list) and solo:
        series.append(_series("solo mean (no sharing)", solo, dash=True))
    return series


def _eval_series(status: Mapping[str, Any], history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    given = status.get("eval_series")
    if isinstance(given, list):
        return [row for row in given if isinstance(row, dict) and isinstance(row.get("points"), list)]
    evals = status.get("eval_history") or []
    start = _start_x(evals, history)  # the before-training evaluation (round null)
    accuracy, reward = [], []
    for row in evals:
        x = row["round"] if is_number(row.get("round")) else start
        if is_number(row.get("accuracy")):
            accuracy.append([x, row["accuracy"]])
        if is_number(row.get("reward")):
            reward.append([x, row["reward"]])
    series = [_series("held-out accuracy", accuracy)] if accuracy else []
    if reward:
        series.append(_series("held-out reward", reward, dash=True))
    return series


def _eval_start(status: Mapping[str, Any], history: list[dict[str, Any]]) -> int | None:
    """Where the before-training evaluation (round null) sits on the x axis, if there is one."""
    evals = status.get("eval_history") or []
    if isinstance(status.get("eval_series"), list) or not any(row.get("round") is None for row in evals):
        return None
    return _start_x(evals, history)


def _start_x(evals: list[dict[str, Any]], history: list[dict[str, Any]]) -> int:
    """The x of the evaluation before training: the weights a node starts its first round with
    are those "after" the round before it (a point's round is the round whose training made its
    weights), and never left of round 0 (a first node starts at 0): the round before the first
    one played, at least 0, unless a later evaluation already sits there (weights after round 0)."""
    rounds = [row["round"] for row in [*history, *evals] if is_number(row.get("round"))]
    if not rounds:
        return 0
    first = min(rounds)
    x = max(0, first - 1)
    taken = any(is_number(row.get("round")) and row["round"] == x for row in evals)
    return first - 1 if taken else x


def _eval_range(status: Mapping[str, Any], history: list[dict[str, Any]]) -> list[int] | None:
    """The x range of the held-out chart: from its first point to the last round played, so a
    single early point sits on an axis of the rounds so far, never on one padded into negatives."""
    if isinstance(status.get("eval_series"), list):
        return None
    evals = status.get("eval_history") or []
    if not evals:
        return None
    xs = [row["round"] for row in [*history, *evals] if is_number(row.get("round"))]
    if any(row.get("round") is None for row in evals):
        xs.append(_start_x(evals, history))
    return [min(xs), max(xs)] if xs else None


def _train_series(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    charts = []
    for key, label in TRAIN_METRICS:
        points = []
        for row in history:
            metrics = row.get("train_metrics")
            if not isinstance(metrics, Mapping) or not is_number(row.get("round")):
                continue
            if key == "tokens_per_s":
                tokens, seconds = metrics.get("completion_tokens"), metrics.get("seconds")
                value = tokens / seconds if is_number(tokens) and is_number(seconds) and seconds > 0 else None
            else:
                value = metrics.get(key)
            if is_number(value):
                points.append([row["round"], value])
        if points:
            charts.append({"key": key, "label": label, "points": points})
    return charts


def _rejections(status: Mapping[str, Any], history: list[dict[str, Any]]) -> list[list[Any]]:
    """Rejections by reason: the history's records summed, or the node's counts since it
    started when those are higher (records older than the history it keeps)."""
    totals: Counter[str] = Counter()
    for row in history:
        if isinstance(row.get("rejected"), Mapping):
            totals.update({k: int(v) for k, v in row["rejected"].items() if is_number(v)})
    own = status.get("rejections")
    if isinstance(own, Mapping):
        for reason, count in own.items():
            if is_number(count) and count > totals[reason]:
                totals[reason] = int(count)
    return [
        [reason, count] for reason, count in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])) if count
    ]


def _rounds_table(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for row in history[-_ROUNDS_SHOWN:][::-1]:
        rejected = row.get("rejected")
        reasons = (
            ", ".join(f"{k} {v}" for k, v in sorted(rejected.items(), key=lambda kv: -kv[1]) if v)
            if isinstance(rejected, Mapping)
            else ""
        )
        ev = row.get("eval") if isinstance(row.get("eval"), Mapping) else None
        rows.append(
            {
                "round": row.get("round"),
                "reward": row.get("reward"),
                "rollouts_in": row.get("rollouts_in"),
                "rollouts_out": row.get("rollouts_out"),
                "rejected": rejected_total(rejected),
                "reasons": reasons,
                "accuracy": ev.get("accuracy") if ev else None,
                "note": "skipped" if row.get("skipped") else ("deferred" if row.get("eval_deferred") else ""),
            }
        )
    return rows


def _contributions(
    status: Mapping[str, Any], history: list[dict[str, Any]], me: str | None
) -> list[dict[str, Any]]:
    """Per other peer, from this node's records: rounds its batch verified, rounds we trained on
    its groups, and rejections counted against it when the status has them."""
    accepted: Counter[str] = Counter()
    sampled: Counter[str] = Counter()
    last_seen: dict[str, int] = {}
    for row in history:
        for peer in row.get("accepted_peers") or []:
            accepted[str(peer)] += 1
            if is_number(row.get("round")):
                last_seen[str(peer)] = row["round"]
        for peer in row.get("external_peers_trained_on") or []:
            sampled[str(peer)] += 1
    given = status.get("peer_rejections")
    rejected = (
        {str(k): int(v) for k, v in given.items() if is_number(v)} if isinstance(given, Mapping) else {}
    )
    banned = set(map(str, status.get("banned") or []))
    connected = set(status.get("peers") or [])
    rewarded = status.get("peer_rewards") if isinstance(status.get("peer_rewards"), Mapping) else {}
    ids = (set(accepted) | set(sampled) | set(rejected) | set(rewarded) | banned | connected) - {me}
    rows = [
        {
            "peer_id": peer,
            "name": peer_name(peer),
            "accepted": accepted[peer],
            "rejected": rejected.get(peer, 0) if isinstance(given, Mapping) else None,
            "sampled": sampled[peer],
            "last_round": last_seen.get(peer),
            "connected": peer in connected,
            "banned": peer in banned,
        }
        for peer in ids
    ]
    rows.sort(key=lambda r: (-r["accepted"], -r["sampled"], r["peer_id"]))
    return rows


def _leaderboard(
    status: Mapping[str, Any],
    history: list[dict[str, Any]],
    me: str | None,
    contributions: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], str]:
    given = status.get("leaderboard")
    if isinstance(given, list):
        rows = [dict(row) for row in given if isinstance(row, dict) and row.get("peer_id")]
        for row in rows:
            row["peer_id"] = str(row["peer_id"])
            row["name"] = peer_name(row["peer_id"])
        note = str(status.get("leaderboard_note") or "")
    else:
        # A schedule swarm keeps no shared table: rank what this node saw. Its own reward is the
        # mean of its recent rounds; another peer's standing is how much of its work verified.
        rows = []
        if me:
            rewards = [row["reward"] for row in history if is_number(row.get("reward"))]
            rows.append(
                {
                    "peer_id": me,
                    "name": peer_name(me),
                    "reward": statistics.fmean(rewards[-_RECENT:]) if rewards else None,
                    "rounds": sum(1 for row in history if row.get("completed")),
                    "accepted": None,
                    "sampled": None,
                    "note": "this node",
                }
            )
        seen = status.get("peer_rewards") if isinstance(status.get("peer_rewards"), Mapping) else {}
        for row in contributions:
            if row["accepted"] or row["sampled"] or row["peer_id"] in seen:
                reward = seen.get(row["peer_id"])
                rows.append(
                    {
                        "peer_id": row["peer_id"],
                        "name": row["name"],
                        "reward": reward if is_number(reward) else None,
                        "rounds": row["accepted"],
                        "accepted": row["accepted"],
                        "sampled": row["sampled"],
                        "note": "banned" if row["banned"] else "",
                    }
                )
        note = (
            f"as this node saw it: reward = mean of the last {_RECENT} rounds (own completions; "
            "others: their batches verified here, what winners are ranked by); rounds = rounds "
            "completed (own) or rounds whose batch verified here (others)"
        )
    rows.sort(
        key=lambda r: (
            -(r["reward"] if is_number(r.get("reward")) else -1e9),
            -(r.get("rounds") or 0),
            r["peer_id"],
        )
    )
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
    if len(rows) > _LEADERBOARD_SHOWN:
        note = f"{note} · top {_LEADERBOARD_SHOWN} of {len(rows)}".lstrip(" ·")
        rows = rows[:_LEADERBOARD_SHOWN]
    return rows, note


def _feed(status: Mapping[str, Any], history: list[dict[str, Any]], me: str | None) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    given = status.get("rollouts")
    sources = [(None, given)] if isinstance(given, list) else []
    sources += [(row.get("round"), row.get("rollouts")) for row in history[::-1]]
    for round_number, items in sources:
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            peer = str(item.get("peer_id") or me or "")
            completions = [c for c in item.get("completions") or [] if isinstance(c, dict)]
            entries.append(
                {
                    "round": item.get("round", round_number),
                    "peer_id": peer,
                    "name": peer_name(peer) if peer else "",
                    "task": item.get("task"),
                    "index": item.get("index"),
                    "question": item.get("question"),
                    "completions": [
                        {"text": str(c.get("text", "")), "reward": c.get("reward")} for c in completions
                    ],
                    "verdict": str(item.get("verdict") or ("local" if peer == me else "verified")),
                    "reason": item.get("reason"),
                }
            )
            if len(entries) >= _FEED_SHOWN:
                return entries
    return entries


def _count(number: Any, what: str) -> str:
    return f"{number} {what}" if number == 1 else f"{number} {what}s"


def _pace(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """A node's busy-host pace (swarmp2p/round_pace.py), as the page says it: "normal", or
    "busy host" with what the node does now out of what it would, since which round and why.
    None when the status has no pace (a simulation report, an experiment)."""
    pace = status.get("pace")
    if not isinstance(pace, Mapping) or not all(
        is_number(pace.get(key)) for key in ("level", "threads", "questions", "of_questions")
    ):
        return None
    threads = _count(pace["threads"], "thread")
    groups = f"{pace.get('n_local', '–')} + {pace.get('n_external', '–')} groups"
    if pace["level"] <= 0:
        detail = f"{threads}, all {pace['of_questions']} questions, {groups}"
        return {"busy": False, "label": "normal", "detail": detail, "since_round": None}
    since_round = pace.get("since_round") if is_number(pace.get("since_round")) else None
    parts = (
        f"{threads}, {pace['questions']}/{pace['of_questions']} questions, {groups}",
        f"since round {since_round}" if since_round is not None else "",
        str(pace.get("reason") or ""),
    )
    detail = " · ".join(part for part in parts if part)
    return {"busy": True, "label": "busy host", "detail": detail, "since_round": since_round}


def _summary(rows: Any) -> list[list[str]]:
    if not isinstance(rows, list):
        return []
    return [[str(row[0]), str(row[1])] for row in rows if isinstance(row, list) and len(row) == 2]


def build_view(status: Mapping[str, Any]) -> dict[str, Any]:
    """The page's model of a normalized status (see `normalize_status`)."""
    history = [row for row in status.get("history") or [] if isinstance(row, dict)]
    me = status.get("peer_id") if status.get("source", "node") == "node" else None
    # Who sent what is known to a node only: a report or an experiment has no such records.
    contributions = _contributions(status, history, me) if me else []
    leaderboard, leaderboard_note = _leaderboard(status, history, me, contributions)
    schedule = status.get("schedule")
    live = (
        not status.get("stopped")
        and isinstance(schedule, Mapping)
        and all(is_number(schedule.get(key)) for key in ("genesis_ms", "round_ms"))
    )
    last_reward = next((row["reward"] for row in history[::-1] if is_number(row.get("reward"))), None)
    return {
        "source": status.get("source", "node"),
        "me": {"peer_id": me, "name": peer_name(me)} if me else None,
        "swarm_id": status.get("swarm_id")
        or (schedule.get("swarm_id") if isinstance(schedule, Mapping) else None),
        "schedule": (
            {
                "genesis_ms": schedule["genesis_ms"],
                "round_ms": schedule["round_ms"],
                "stage_count": schedule.get("stage_count") or 1,
            }
            if live
            else None
        ),
        "last_reward": last_reward,
        "rounds_recorded": len(history),
        "reward_series": _reward_series(status, history),
        "eval_series": _eval_series(status, history),
        "eval_start": _eval_start(status, history),
        "eval_range": _eval_range(status, history),
        "train_series": _train_series(history),
        "rounds": _rounds_table(history),
        "rejections": _rejections(status, history),
        "contributions": contributions,
        "leaderboard": leaderboard,
        "leaderboard_note": leaderboard_note,
        "feed": _feed(status, history, me),
        "summary": _summary(status.get("summary_rows")),
        "peers": [{"peer_id": peer, "name": peer_name(peer)} for peer in status.get("peers") or []],
        "pace": _pace(status),
    }
