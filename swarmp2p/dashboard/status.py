"""The dashboard's status: what a status source returns, made JSON-safe and put in the schema.

Status schema (every key optional, extra keys are passed through to `/api/status`):

    {"peer_id": str, "round": int, "phase": str,
     "node_phase": str (a node's start-up phase: starting, loading, evaluating, joining, playing),
     "peers": [peer id, ...] or int,
     "history": [{"round": int, "reward": float, "rollouts_in": int,
                  "rollouts_out": int, "rejected": int or {reason: int},
                  "accepted_peers": [id], "external_peers_trained_on": [id],
                  "train_metrics": {"loss", "kl", "grad_norm", "clip_fraction",
                                    "completion_tokens", "seconds", ...},
                  "rollouts": [{"peer_id", "task", "index", "completions": [{"text", "reward"}],
                                "verdict": "local" | "verified" | "rejected"}]}, ...],
     "counters": {name: number, ...},
     "rejections": {reason: int},
     "schedule": {"swarm_id", "genesis_ms", "round_ms", "stage_count", ...},
     "leaderboard": [{"peer_id", "reward", "rounds", ...}],
     "eval": {"round": int or null, "step": int, "accuracy": float, "reward": float,
              "accuracy_change": float or null, "questions": int, "seconds": float,
              "per_task": {task: {"accuracy": float, "reward": float, "n": int}},
              "samples": [{"task", "completion", "reference", "correct", "reward"}, ...],
              "simulated": bool, "slices": [{"round": int or null, "step": int, "questions": int}]},
     "eval_history": [{"round": int or null, "step": int, "accuracy": float, "reward": float}, ...],
     "eval_deferred": {"round": int, "needed_s": float, "left_s": float} or null,
     "eval_progress": {"units": int, "done": int, "since_round": int or null} or null}

(`eval*` come from swarmp2p/heldout.py: the held-out evaluation; round null = before training;
`slices`: which rounds' weights answered how many questions of an evaluation answered in slices;
`eval_progress`: the evaluation being answered now.)
"""

from __future__ import annotations

import enum
import inspect
import math
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

StatusSource = Callable[[], Mapping[str, Any] | Awaitable[Mapping[str, Any]]]

MAX_HISTORY = 10_000  # rounds kept in one response; a long-lived node must not grow the page forever


class StatusUnavailable(Exception):
    """The status source could not produce a status (a missing report file, a down node)."""


def jsonable(value: Any) -> Any:
    """A JSON-safe copy of `value`: NaN/inf become None, Paths/enums/attrs become plain data."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(item) for item in value]
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if attrs.has(type(value)):
        return jsonable(attrs.asdict(value, recurse=False))
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def normalize_status(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The status in the schema above, with `peer_count` added and bad entries dropped."""
    if not isinstance(raw, Mapping):
        raise StatusUnavailable(f"status must be a JSON object, got {type(raw).__name__}")
    status = jsonable(raw)
    peers = status.get("peers")
    if isinstance(peers, int) and not isinstance(peers, bool):
        status["peer_count"], status["peers"] = peers, []
    elif isinstance(peers, list):
        status["peers"] = [str(peer) for peer in peers]
        status["peer_count"] = len(peers)
    else:
        status["peers"], status["peer_count"] = [], 0
    history = status.get("history")
    rows = [row for row in history if isinstance(row, dict)] if isinstance(history, list) else []
    status["history"] = rows[-MAX_HISTORY:]
    counters = status.get("counters")
    status["counters"] = (
        {key: value for key, value in counters.items() if is_number(value)}
        if isinstance(counters, dict)
        else {}
    )
    evals = status.get("eval_history")
    rows = [row for row in evals if isinstance(row, dict)] if isinstance(evals, list) else []
    status["eval_history"] = rows[-MAX_HISTORY:]
    for key in ("eval", "eval_deferred", "eval_progress"):
        if not isinstance(status.get(key), dict):
            status[key] = None
    for key in ("peer_id", "phase", "node_phase"):
        if key in status and status[key] is not None:
            status[key] = str(status[key])
    return status


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


async def read_status(source: StatusSource) -> dict[str, Any]:
    result = source()
    if inspect.isawaitable(result):
        result = await result
    return normalize_status(result)
