"""scripts/busy_host.py's table: shares of rounds trained, updated and reported, and fates, from
a node's rounds.jsonl records and log."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "busy_host.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("busy_host", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(round_number: int, fate: str, updated: float | None = None, **more: Any) -> dict[str, Any]:
    metrics = {} if updated is None else {"updated": updated}
    return {"round": round_number, "stage": 0, "fate": fate, "train_metrics": metrics, **more}


def test_rows_count_trained_reported_and_missing_rounds() -> None:
    busy_host = load_script()
    records = [
        record(3, "trained_report_late", 1.0),
        record(4, "skipped"),
        record(5, "completed", 0.0),
        record(7, "completed", 1.0, eval={"accuracy": 0.25}),
    ]
    log = "round 3 (trained, report late) | ...\nwarning: busy host: generate + train overran 2 rounds\n"
    row = busy_host.summarise(records, log)
    assert row["rounds"] == 5  # rounds 3..7; round 6 left no record
    assert (row["trained"], row["updated"], row["reported"]) == (3 / 5, 2 / 5, 2 / 5)
    assert row["fates"] == {"completed": 2, "trained_report_late": 1, "skipped": 1, "no record": 1}
    assert row["heldout"] == {"round": 7, "accuracy": 0.25}
    assert row["pace"] == ["warning: busy host: generate + train overran 2 rounds"]
    table = busy_host.table({"busy": {"nodes": {"node 1": row}}})
    assert "| busy | node 1 | 5 | 60% | 40% | 40% |" in table


def test_a_round_recorded_twice_is_not_a_negative_missing_round() -> None:
    # A node (before the fix that keeps a skipped round skipped) wrote round 9 twice: skipped,
    # then completed. "no record" counts rounds without any record, never below 0.
    busy_host = load_script()
    records = [
        record(8, "completed", 1.0),
        record(9, "skipped"),
        record(9, "completed", 1.0),
        record(10, "completed", 1.0),
    ]
    row = busy_host.summarise(records, "")
    assert row["rounds"] == 3
    assert row["fates"]["no record"] == 0


def test_records_without_a_fate_read_it_from_their_flags() -> None:
    busy_host = load_script()
    assert busy_host.fate_of({"completed": False, "skipped": True}) == "skipped"
    assert busy_host.fate_of({"completed": False}) == "abandoned"
    assert busy_host.fate_of({"completed": True}) == "completed"


def _fake_arm(busy_host: ModuleType, rounds: int) -> Any:
    """run_arm's stand-in: writes the rounds a node would have, returns what a run measures."""

    def run_arm(arm: str, out: Path, nodes: int, minutes: float, extra: list[str]) -> dict[str, Any]:
        for index in range(1, nodes + 1):
            (out / f"node-{index}").mkdir(parents=True, exist_ok=True)
            lines = [json.dumps(record(r, "completed", 1.0)) for r in range(rounds)]
            (out / f"node-{index}" / "rounds.jsonl").write_text("\n".join(lines) + "\n")
            (out / f"node-{index}.log").write_text("")
        return {"ready_s": 5.0, "load_1min": {"start": 4.0 if arm == "busy" else 0.5}}

    return run_arm


def test_the_idle_arm_run_later_joins_the_busy_arm_in_the_same_folder(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    busy_host = load_script()
    out = tmp_path / "busy-host"

    def main(*flags: str) -> str:
        monkeypatch.setattr(sys, "argv", ["busy_host.py", "--out", str(out), *flags])
        busy_host.main()
        return str(capsys.readouterr().out)

    monkeypatch.setattr(busy_host, "run_arm", _fake_arm(busy_host, rounds=4))
    busy_only = main("--minutes", "20", "--arms", "busy")
    assert "| busy | node 3 | 4 |" in busy_only and "| idle |" not in busy_only
    monkeypatch.setattr(busy_host, "run_arm", _fake_arm(busy_host, rounds=6))
    main("--minutes", "20", "--arms", "idle")
    combined = main("--table-only")
    assert "| busy | node 1 | 4 |" in combined and "| idle | node 1 | 6 |" in combined
    assert combined.index("| busy |") < combined.index("| idle |")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["busy"]["load_1min"] == {"start": 4.0} and summary["idle"]["load_1min"] == {"start": 0.5}
    assert summary["busy"]["minutes"] == summary["idle"]["minutes"] == 20
