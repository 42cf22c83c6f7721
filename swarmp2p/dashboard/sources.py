"""Where `swarmp2p dashboard` reads a status from, each turned into the dashboard's schema
(swarmp2p/dashboard/status.py):

- a node's saved status, or anything already in the schema: as is;
- a simulation report (`simulate --out DIR` writes DIR/report.json): per-round means and bands,
  the peers as a leaderboard, the summary and rejections by reason;
- an experiment (`experiment --out DIR`: table.json + jobs.json): one reward curve and one
  held-out accuracy curve per arm, a leaderboard of every (arm, seed, peer);
- a data dir (`swarmp2p node --data-dir DIR`): its whole rounds.jsonl, eval.jsonl and swarm.json
  and, while the node runs, its live /api/status merged in (node.json names its dashboard).

Every reader is a pure function of the files it reads, re-run on every request.
"""

from __future__ import annotations

import json
import statistics
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swarmp2p.dashboard.status import MAX_HISTORY, StatusUnavailable, is_number

MAX_FILE_BYTES = 64 * 1024 * 1024  # a status file is kilobytes; refuse to slurp a mistaken huge file


def read_json(path: Path) -> Any:
    """The JSON in `path`; StatusUnavailable naming the file, in one line, when that fails."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise StatusUnavailable(f"cannot read {path}: {error.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise StatusUnavailable(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StatusUnavailable(f"{path} is not valid JSON: {error}") from None


def read_jsonl(path: Path, limit: int = MAX_HISTORY) -> list[dict[str, Any]]:
    """The last `limit` JSON objects of a .jsonl file; a torn or bad line is skipped."""
    rows: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the line a running node is writing right now
                if isinstance(row, dict):
                    rows.append(row)
                    if len(rows) > 2 * limit:
                        del rows[:-limit]
    except FileNotFoundError:
        return []
    except OSError as error:
        raise StatusUnavailable(f"cannot read {path}: {error.strerror}") from None
    return rows[-limit:]


# ---- a simulation report ---------------------------------------------------------------


def is_simulation_report(data: Any) -> bool:
    return isinstance(data, Mapping) and "report_version" in data and isinstance(data.get("rounds"), list)


def report_status(report: Mapping[str, Any]) -> dict[str, Any]:
    """A simulation report (simulator/report.py) in the dashboard's schema."""
    scenario = report.get("scenario") if isinstance(report.get("scenario"), Mapping) else {}
    summary = report.get("summary") if isinstance(report.get("summary"), Mapping) else {}
    rounds = [row for row in report.get("rounds") or [] if isinstance(row, Mapping)]
    peers = [peer for peer in report.get("peers") or [] if isinstance(peer, Mapping)]
    history = [
        {
            "round": row.get("round"),
            "reward": row.get("reward_mean"),
            "reward_min": row.get("reward_min"),
            "reward_max": row.get("reward_max"),
            "rollouts_in": row.get("rollouts_in_mean"),
            "rejected": row.get("rejected") if isinstance(row.get("rejected"), Mapping) else {},
            "completed": row.get("honest_completed"),
            "present": row.get("honest_present"),
        }
        for row in rounds
    ]
    leaderboard = [
        {
            "peer_id": peer.get("peer_id"),
            "reward": peer.get("final_reward"),
            "rounds": peer.get("rounds_completed"),
            "role": peer.get("role"),
            "note": _peer_note(peer),
        }
        for peer in peers
    ]
    name = scenario.get("name", "simulation")
    rows = [["scenario", f"{name} (seed {scenario.get('seed')})"]]
    learner = scenario.get("policy", "sim")
    rows.append(
        [
            "learner",
            "the real trainer (tiny model)" if learner == "trainer" else "simulated learner (no LM trained)",
        ]
    )
    for key, value in sorted(summary.items()):
        if key == "round_agreement" and isinstance(value, list):
            agreed = sum(
                1
                for row in value
                if isinstance(row, Mapping) and row.get("on_current_round") == row.get("honest_online")
            )
            rows.append(
                ["rounds where every online honest peer was on the current round", f"{agreed} / {len(value)}"]
            )
        elif key != "rejections":
            rows.append([str(key).replace("_", " "), _short(value)])
    return {
        "source": "simulation report",
        "peer_id": f"simulation: {name}",
        "round": rounds[-1].get("round") if rounds else None,
        "phase": "finished",
        "peers": [str(peer.get("peer_id")) for peer in peers if peer.get("peer_id")],
        "history": history,
        "solo": _solo_points(report.get("solo")),
        **_held_out(rounds),
        "rejections": summary.get("rejections") if isinstance(summary.get("rejections"), Mapping) else {},
        "leaderboard": leaderboard,
        "leaderboard_note": "every simulated peer, by its reward in its last completed round",
        "summary_rows": rows,
        "counters": {},
    }


def _held_out(rounds: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The honest peers' mean held-out accuracy per round (`simulate --eval-every`), if any."""
    points = [
        [row.get("round"), row.get("eval_accuracy_mean")]
        for row in rounds
        if is_number(row.get("round")) and is_number(row.get("eval_accuracy_mean"))
    ]
    if not points:
        return {}
    last = {"round": points[-1][0], "accuracy": points[-1][1]}  # the header's held-out card
    if len(points) > 1:
        last["accuracy_change"] = points[-1][1] - points[-2][1]
    return {"eval_series": [{"label": "held-out accuracy (honest mean)", "points": points}], "eval": last}


def _solo_points(solo: Any) -> list[list[Any]]:
    """The solo baseline's mean reward per round ([round, reward]), [] when the run had none."""
    rows = solo.get("rounds") if isinstance(solo, Mapping) else None
    return [
        [row.get("round"), row.get("reward_mean")]
        for row in rows or []
        if isinstance(row, Mapping) and is_number(row.get("round")) and is_number(row.get("reward_mean"))
    ]


def _peer_note(peer: Mapping[str, Any]) -> str:
    parts = [str(peer.get("role") or "")]
    if peer.get("slow"):
        parts.append("slow")
    if peer.get("banned_by_honest_peers"):
        parts.append(f"banned by {peer['banned_by_honest_peers']} honest peers")
    return ", ".join(part for part in parts if part)


def _short(value: Any) -> str:
    if isinstance(value, list):
        return f"{len(value)} entries"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_short(v)}" for k, v in sorted(value.items())) or "none"
    return str(value)


# ---- an experiment ----------------------------------------------------------------------


def is_experiment_dir(path: Path) -> bool:
    return (path / "table.json").is_file()


def experiment_status(directory: Path) -> dict[str, Any]:
    """An experiment's output directory (simulator/experiment.py) in the dashboard's schema."""
    table = read_json(directory / "table.json")
    if not isinstance(table, Mapping):
        raise StatusUnavailable(f"{directory / 'table.json'} is not an experiment table")
    jobs_path = directory / "jobs.json"
    jobs = read_json(jobs_path) if jobs_path.is_file() else []
    curves = table.get("curves") if isinstance(table.get("curves"), Mapping) else {}
    reward_series, eval_series = [], []
    for arm, curve in sorted(curves.items()):
        if not isinstance(curve, Mapping):
            continue
        points = [
            [row["round"], row["mean"]]
            for row in curve.get("reward") or []
            if is_number(row.get("round")) and is_number(row.get("mean"))
        ]
        reward_series.append({"label": str(arm), "points": points})
        accuracy = [
            [row["rounds_trained"], row["mean"]]
            for row in curve.get("accuracy") or []
            if is_number(row.get("rounds_trained")) and is_number(row.get("mean"))
        ]
        if accuracy:
            eval_series.append({"label": str(arm), "points": accuracy})
    leaderboard, rejections = [], {}
    for job in jobs if isinstance(jobs, list) else []:
        if not isinstance(job, Mapping):
            continue
        for reason, count in (job.get("rejections") or {}).items():
            if is_number(count):
                rejections[reason] = rejections.get(reason, 0) + count
        for peer in job.get("peers") or []:
            rewards = [r for r in peer.get("rewards") or [] if is_number(r)]
            leaderboard.append(
                {
                    "peer_id": peer.get("peer_id"),
                    "reward": statistics.fmean(rewards[-5:]) if rewards else None,
                    "rounds": len(rewards),
                    "note": f"arm {job.get('arm')}, seed {job.get('seed')}",
                }
            )
    settings = table.get("settings") if isinstance(table.get("settings"), Mapping) else {}
    rows = [
        [str(key), _short(value)] for key, value in sorted(settings.items()) if not isinstance(value, Mapping)
    ]
    return {
        "source": "experiment",
        "peer_id": f"experiment: {directory.name}",
        "round": max((p[0] for s in reward_series for p in s["points"]), default=None),
        "phase": "finished",
        "peers": [],
        "history": [],
        "reward_series": reward_series,
        "eval_series": eval_series,
        "eval_x": "rounds trained",
        "leaderboard": leaderboard,
        "leaderboard_note": "every (arm, seed, peer): mean reward of its last 5 rounds",
        "rejections": rejections,
        "summary_rows": rows,
        "counters": {},
    }


# ---- a node's data dir --------------------------------------------------------------------


def is_data_dir(path: Path) -> bool:
    return (path / "rounds.jsonl").is_file() or (path / "swarm.json").is_file()


def data_dir_status(
    directory: Path, *, live: Mapping[str, Any] | None = None, running: bool = False
) -> dict[str, Any]:
    """A node's data dir in the dashboard's schema: the whole rounds.jsonl as history (not only
    the rounds since the node last started), the held-out evaluations, the swarm's schedule;
    `live` (the running node's own status) supplies what only the running node knows."""
    status: dict[str, Any] = dict(live or {})
    history = status["history"] = merge_history(read_jsonl(directory / "rounds.jsonl"), status.get("history"))
    last = history[-1] if history else {}
    status.setdefault("source", "node")
    status.setdefault("peer_id", last.get("peer_id"))
    status.setdefault("round", last.get("round"))
    status.setdefault("phase", "running" if live or running else "stopped")
    if "peers" not in status:
        status["peers"] = list(last.get("accepted_peers") or [])
    schedule_path = directory / "swarm.json"
    if "schedule" not in status and schedule_path.is_file():
        schedule = read_json(schedule_path)
        if isinstance(schedule, dict):
            status["schedule"] = schedule
            status.setdefault("swarm_id", schedule.get("swarm_id"))
    if "eval_history" not in status:
        evals = []
        for row in history:
            if isinstance(row.get("eval"), Mapping):
                evals.append({key: row["eval"].get(key) for key in ("round", "step", "accuracy", "reward")})
        status["eval_history"] = evals
        status.setdefault(
            "eval", next((row["eval"] for row in history[::-1] if isinstance(row.get("eval"), dict)), None)
        )
    if not live and not running:
        status["stopped"] = True  # no countdown: the round clock runs on, this node does not
    return status


def merge_history(logged: list[dict[str, Any]], live: Any) -> list[dict[str, Any]]:
    """The rounds of the log (rounds.jsonl: every round, across restarts) and the live ones the
    log lacks yet, by round number."""
    rows = list(logged)
    seen = {row.get("round") for row in rows}
    rows += [row for row in live or [] if isinstance(row, dict) and row.get("round") not in seen]
    rows.sort(key=lambda row: row.get("round") if is_number(row.get("round")) else -1)
    return rows[-MAX_HISTORY:]


def node_dashboard_url(directory: Path) -> str | None:
    """The dashboard URL a running node wrote in its node.json (None: not running, or none)."""
    try:
        info = json.loads((directory / "node.json").read_text())
    except (OSError, ValueError):
        return None
    url = info.get("dashboard_url") if isinstance(info, dict) else None
    return url if isinstance(url, str) and url.startswith("http") else None


def fetch_json(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """GET a JSON object (blocking); StatusUnavailable in one line when that fails."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            data = response.read(MAX_FILE_BYTES + 1)
    except urllib.error.HTTPError as error:
        raise StatusUnavailable(f"{url} answered HTTP {error.code}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise StatusUnavailable(f"cannot reach {url}: {reason}") from None
    try:
        status = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise StatusUnavailable(f"{url} did not answer JSON") from None
    if not isinstance(status, dict):
        raise StatusUnavailable(f"{url} answered a JSON {type(status).__name__}, not an object")
    return status


def status_of_path(path: Path) -> dict[str, Any]:
    """Whatever `path` is (a data dir, an experiment dir, a report or status file), as a status."""
    if path.is_dir():
        if is_experiment_dir(path):
            return experiment_status(path)
        if (path / "report.json").is_file():
            return status_of_path(path / "report.json")
        if is_data_dir(path):
            live = None
            url = node_dashboard_url(path)
            if url:
                try:
                    live = fetch_json(url.rstrip("/") + "/api/status", timeout_s=2.0)
                except StatusUnavailable:
                    live = None  # a stale node.json, or a node that is stopping: the files still tell
            # node.json exists while a node runs on the dir (it is removed at exit).
            return data_dir_status(path, live=live, running=(path / "node.json").exists())
        raise StatusUnavailable(
            f"{path} holds no rounds.jsonl, report.json or table.json "
            "(not a data dir, simulation or experiment)"
        )
    data = read_json(path)
    if not isinstance(data, dict):
        raise StatusUnavailable(f"{path} holds a JSON {type(data).__name__}, not an object")
    if is_simulation_report(data):
        return report_status(data)
    return data
