"""The swarm schedule of a chain-less swarm: made by its first peer, kept in <data_dir>/swarm.json.

A restarted first peer reads its schedule back and rejoins its own swarm; a joiner saves the
schedule it learned from a bootstrap's hello. A file this version cannot use (damaged, written by
an older or newer swarmp2p) is a one-line NodeError saying what to do.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

import attrs

from swarmp2p.node_config import NodeError

SWARM_FILE = "swarm.json"


def new_schedule(round_seconds: float, now_ms: int, rules: dict[str, Any], game: str = "single") -> Any:
    """A new swarm: genesis now, a fresh id and seed, and `rules` (swarmp2p.rules.rules_of_config)
    from this first peer's config; it plays `game` (a row of protocol/games.py), whose stages
    share a round. Raises NodeError when the rules break a wire bound."""
    from protocol.games import stage_count_of
    from protocol.messages import SwarmSchedule

    schedule = SwarmSchedule(
        swarm_id=secrets.token_hex(6),
        genesis_ms=now_ms,
        round_ms=int(round_seconds * 1000),
        stage_count=stage_count_of(game),
        seed=secrets.randbits(62),
        game=game,
        **rules,
    )
    check_schedule(schedule, "the swarm rules from your config")
    return schedule


def check_schedule(schedule: Any, source: str) -> None:
    from protocol import codec
    from protocol.errors import ProtocolError

    try:
        codec.validate(schedule)
    except ProtocolError as error:
        raise NodeError(f"{source} cannot be sent to peers: {error.message}") from None


def save_schedule(data_dir: Path, schedule: Any) -> None:
    path = data_dir / SWARM_FILE
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps(attrs.asdict(schedule)))
    os.replace(staging, path)


def load_saved_schedule(data_dir: Path) -> Any | None:
    """The schedule an earlier run saved, or None. A file from an older swarmp2p (no rules in
    it) or a damaged one is a one-line NodeError telling the user what to do."""
    from protocol.messages import SwarmSchedule

    path = data_dir / SWARM_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as error:
        raise NodeError(f"{path} is corrupt ({error}); delete it to start a new swarm") from None
    if not isinstance(data, dict):
        raise NodeError(f"{path} is corrupt (not a JSON object); delete it to start a new swarm")
    expected = [field.name for field in attrs.fields(SwarmSchedule)]
    missing = [name for name in expected if name not in data]
    unknown = sorted(set(data) - set(expected))
    if missing:
        # Written by swarmp2p before protocol 2: that swarm's peers score by their local rules
        # and speak the old protocol, so it cannot be resumed; say how to get going again.
        raise NodeError(
            f"{path} was saved by an older swarmp2p (no {', '.join(missing)}): its swarm speaks an "
            "older protocol. Delete the file to start a new swarm, or join one with --bootstrap"
        )
    if unknown:
        raise NodeError(
            f"{path} has unknown keys {', '.join(unknown)} (saved by a newer swarmp2p?); "
            "delete it to start a new swarm"
        )
    try:
        for name in ("tasks", "weights"):  # JSON has lists; the schedule holds tuples
            if isinstance(data[name], list):
                data[name] = tuple(data[name])
        schedule = SwarmSchedule(**data)
        check_schedule(schedule, str(path))
    except (ValueError, TypeError, NodeError) as error:
        raise NodeError(f"{path} is corrupt ({error}); delete it to start a new swarm") from None
    return schedule
