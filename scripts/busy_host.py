"""Three `swarmp2p node` peers on their defaults beside two busy CPU loops, then the same three
alone: per node, the share of rounds it trained in and reported in, each round's fate, how its
pace changed and its held-out accuracy at the end.

    python scripts/busy_host.py --minutes 20 --out runs/busy-host [-- NODE FLAGS]

Each arm ("busy", then "idle") starts fresh data dirs under OUT/<arm>: node 1 starts a swarm, the
others join it with `--bootstrap` (its printed address), as README's commands do. The arm's
minutes count from when all three print that they play rounds. The busy arm starts two
`python -c 'while True: pass'` loops before the nodes and stops them after. Every node then gets
SIGINT (a clean stop), and its rounds.jsonl and log are read. The table goes to stdout and
OUT/summary.json; it holds every arm under OUT, so `--arms busy` now and `--arms idle` later (same
OUT) give one table, as does `--table-only`. Each arm's own figures (minutes, load, ready time)
stay in OUT/<arm>/arm.json.

A round counts as trained when its training step ran (its record has training metrics), as
updated when that step changed the weights (`updated` 1), as reported when it completed; rounds
a node lived through that left no record (none should) count as neither.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ADDRESS = re.compile(r"listening on (\S+)")
PLAYING = "started: playing"
PACE_LINES = ("busy host:", "rounds fit again")
FATES = ("completed", "reported_late", "trained_report_late", "abandoned", "skipped", "missed")
ARMS = ("busy", "idle")
ARM_FILE = "arm.json"  # OUT/<arm>/arm.json: what the arm's run measured (minutes, load, ...)


def start_node(index: int, out: Path, bootstrap: str | None, extra: list[str]) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "swarmp2p.cli", "node", "--data-dir", str(out / f"node-{index}"), *extra]
    if bootstrap:
        command += ["--bootstrap", bootstrap]
    log = open(out / f"node-{index}.log", "w")  # the child holds it; closed at exit
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)


def wait_in_log(log: Path, process: subprocess.Popen[str], pattern: re.Pattern[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{log.stem} exited with {process.returncode}; see {log}")
        found = pattern.search(log.read_text(errors="replace")) if log.exists() else None
        if found:
            return found.group(1) if found.groups() else found.group(0)
        time.sleep(0.5)
    raise SystemExit(f"{log.stem}: nothing matching {pattern.pattern!r} in {timeout_s:.0f} s; see {log}")


def stop(processes: list[subprocess.Popen[str]], sig: int, timeout_s: float) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(sig)
    for process in processes:
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_arm(arm: str, out: Path, nodes: int, minutes: float, extra: list[str]) -> dict[str, Any]:
    """Start the burners (busy arm) and the nodes, play `minutes`, stop everything."""
    out.mkdir(parents=True, exist_ok=True)
    burners = []
    if arm == "busy":
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    processes: list[subprocess.Popen[str]] = []
    started = time.monotonic()
    load = {"start": os.getloadavg()[0]}
    try:
        first = start_node(1, out, None, extra)
        processes.append(first)
        address = wait_in_log(out / "node-1.log", first, ADDRESS, timeout_s=900)
        processes += [start_node(i, out, address, extra) for i in range(2, nodes + 1)]
        for index, process in enumerate(processes, 1):
            wait_in_log(out / f"node-{index}.log", process, re.compile(re.escape(PLAYING)), timeout_s=900)
        ready_s = time.monotonic() - started
        print(f"{arm}: {nodes} nodes playing after {ready_s:.0f} s; {minutes:g} min from now", flush=True)
        ends = time.monotonic() + minutes * 60
        while time.monotonic() < ends:
            time.sleep(min(15.0, max(0.0, ends - time.monotonic())))
            for index, process in enumerate(processes, 1):
                if process.poll() is not None:
                    raise SystemExit(f"{arm}: node {index} exited early with {process.returncode}")
        load["end"] = os.getloadavg()[0]
    finally:
        stop(processes, signal.SIGINT, timeout_s=120)
        stop(burners, signal.SIGTERM, timeout_s=10)
    return {"ready_s": round(ready_s, 1), "load_1min": load}


def read_rounds(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fate_of(record: dict[str, Any]) -> str:
    """The record's fate (records written before fates were recorded: from its flags)."""
    if "fate" in record:
        return str(record["fate"])
    return "completed" if record.get("completed") else "skipped" if record.get("skipped") else "abandoned"


def summarise(records: list[dict[str, Any]], log_text: str) -> dict[str, Any]:
    """One node's row: shares of rounds trained, updated and reported, fates, pace lines and
    the last held-out accuracy (with the round it was measured after)."""
    final = [r for r in records if r.get("stage", 0) == 0]
    rounds = {r["round"] for r in final}
    lived = (max(rounds) - min(rounds) + 1) if rounds else 0
    trained = sum(1 for r in final if r.get("train_metrics"))
    updated = sum(1 for r in final if float(r.get("train_metrics", {}).get("updated", 0.0)) > 0)
    fates = Counter(fate_of(r) for r in final)
    evals = [(r["round"], r["eval"]) for r in final if isinstance(r.get("eval"), dict)]
    accuracy = evals[-1][1].get("accuracy") if evals else None
    return {
        "rounds": lived,
        "trained": trained / lived if lived else 0.0,
        "updated": updated / lived if lived else 0.0,
        "reported": fates["completed"] / lived if lived else 0.0,
        "fates": {fate: fates[fate] for fate in FATES if fates[fate]} | {"no record": lived - len(rounds)},
        "pace": [line for line in log_text.splitlines() if any(mark in line for mark in PACE_LINES)],
        "heldout": None if accuracy is None else {"round": evals[-1][0], "accuracy": accuracy},
        "evaluations": len(evals),
    }


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| arm | node | rounds | trained | updated | reported | fates | pace changes | held-out (round) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, result in results.items():
        for name, row in result["nodes"].items():
            fates = ", ".join(f"{fate} {count}" for fate, count in row["fates"].items() if count)
            held = row["heldout"]
            held_text = "-" if held is None else f"{held['accuracy']:.3f} ({held['round']})"
            lines.append(
                f"| {arm} | {name} | {row['rounds']} | {row['trained']:.0%} | {row['updated']:.0%} | "
                f"{row['reported']:.0%} | {fates} | {len(row['pace'])} | {held_text} |"
            )
    return "\n".join(lines)


def collect(out: Path, nodes: int) -> dict[str, dict[str, Any]]:
    """Every arm OUT holds, busy first, whichever run left it: the arms can run on different
    days (the idle arm wants an idle machine), and each run's measurements stay in its arm's
    folder so that a later run or `--table-only` reports both."""
    results: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        where = out / arm
        if not where.is_dir():
            continue
        measured = json.loads((where / ARM_FILE).read_text()) if (where / ARM_FILE).exists() else {}
        results[arm] = {
            **measured,
            "nodes": {
                f"node {i}": summarise(
                    read_rounds(where / f"node-{i}" / "rounds.jsonl"),
                    (where / f"node-{i}.log").read_text(errors="replace")
                    if (where / f"node-{i}.log").exists()
                    else "",
                )
                for i in range(1, nodes + 1)
            },
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--minutes", type=float, default=20.0, help="per arm, from when all nodes play")
    parser.add_argument("--arms", default="busy,idle", help="busy, idle or both, in this order")
    parser.add_argument("--out", type=Path, default=Path("runs/busy-host"))
    parser.add_argument("--table-only", action="store_true", help="only re-read OUT (every arm in it)")
    parser.add_argument("extra", nargs="*", help="more `swarmp2p node` flags, after --")
    args = parser.parse_args()
    # SIGTERM ends the run through the arms' `finally` (nodes and busy loops stopped), not as a
    # bare kill that leaves them running.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    arms = [arm for arm in args.arms.split(",") if arm]
    if not set(arms) <= {"busy", "idle"}:
        raise SystemExit("--arms: busy and/or idle")
    for arm in [] if args.table_only else arms:
        run = run_arm(arm, args.out / arm, args.nodes, args.minutes, args.extra)
        date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        measured = {"minutes": args.minutes, "date": date, **run}
        (args.out / arm / ARM_FILE).write_text(json.dumps(measured, indent=1) + "\n")
    results = collect(args.out, args.nodes)
    summary = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(table(results))
    for arm, result in results.items():
        for name, row in result["nodes"].items():
            for line in row["pace"]:
                print(f"{arm} {name}: {line}")


if __name__ == "__main__":
    main()
