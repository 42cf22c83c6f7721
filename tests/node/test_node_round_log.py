"""The node's one line per round (and its rounds.jsonl record)."""

from __future__ import annotations

import json
from pathlib import Path

from swarmp2p.peer import RoundRecord
from swarmp2p.round_log import RoundLog


def _record(**changes: object) -> RoundRecord:
    fields: dict[str, object] = {
        "round": 7,
        "stage": 0,
        "completed": True,
        "reward": 0.25,
        "rollouts_in": 12,
        "rollouts_out": 4,
        "external_peers_trained_on": ("a", "b"),
        "accepted_peers": ("a", "b", "c"),
        "rejected": {},
        "opened_ms": 0,
        "finished_ms": 1,
    }
    fields.update(changes)
    return RoundRecord(**fields)  # type: ignore[arg-type]


def _lines(tmp_path: Path, *records: RoundRecord) -> list[str]:
    lines: list[str] = []
    log = RoundLog(tmp_path / "rounds.jsonl", "me", lambda: {"p1", "p2", "p3"}, lines.append)
    for record in records:
        log(record)
    return [line for line in lines if line.startswith("round ")]  # not "peer ... joined"


def test_round_line_has_reward_peers_rollouts_and_rejections(tmp_path: Path) -> None:
    [line] = _lines(tmp_path, _record())
    assert line == (
        "round 7 | reward 0.250 | peers 3 | rollouts in 12 out 4 | trained on 2 peers | rejected 0"
    )
    [saved] = [json.loads(text) for text in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert saved["round"] == 7 and saved["peer_id"] == "me" and saved["peers"] == 3


def test_timing_rejections_are_told_apart_from_misbehaviour(tmp_path: Path) -> None:
    [line] = _lines(tmp_path, _record(rejected={"stale_round": 2, "late": 1, "forged_reward": 1}))
    assert line.endswith("| rejected 4 (3 out of round)")


def test_skipped_and_abandoned_rounds_are_labelled(tmp_path: Path) -> None:
    skipped, abandoned = _lines(
        tmp_path,
        _record(completed=False, skipped=True, reward=None, rollouts_in=0, rollouts_out=0),
        _record(round=8, completed=False, reward=None),
    )
    assert skipped.startswith("round 7 (skipped: too little time left) | reward n/a |")
    assert abandoned.startswith("round 8 (abandoned) | reward n/a |")


def test_peers_that_join_and_leave_are_said_once_by_name(tmp_path: Path) -> None:
    from swarmp2p.dashboard.names import peer_name

    a, b, c = "12D3KooWAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAaaaaaa", "12D3KooWBbbbbb", "12D3KooWCccccc"
    connected: list[set[str]] = [{a, b}, {a, b}, {b, c}, set()]
    lines: list[str] = []
    log = RoundLog(tmp_path / "rounds.jsonl", "me", lambda: connected[0], lines.append)
    for number in range(4):
        log(_record(round=number))
        connected.pop(0)
    said = [line for line in lines if not line.startswith("round ")]
    assert said == [
        f"peer {peer_name(a)} ({a}) joined",
        f"peer {peer_name(b)} ({b}) joined",
        f"peer {peer_name(a)} ({a}) left (last seen in round 1)",
        f"peer {peer_name(c)} ({c}) joined",
        f"peer {peer_name(b)} ({b}) left (last seen in round 2)",
        f"peer {peer_name(c)} ({c}) left (last seen in round 2)",
    ]
    assert [line.split(" | ")[2] for line in lines if line.startswith("round ")] == [
        "peers 2", "peers 2", "peers 2", "peers 0",
    ]  # fmt: skip
