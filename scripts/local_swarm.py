"""Run N local `swarmp2p node` peers for a while, then plot their held-out accuracy per round.

    python scripts/local_swarm.py --nodes 3 --minutes 30 --out runs/local-swarm [-- NODE FLAGS]

The first node starts a new swarm; the others join it with `--bootstrap` (its printed address).
Every node has its own data dir under OUT (one process per data dir) and one torch thread, so N
nodes on a small machine do not fight over cores. After `--minutes` every node gets SIGINT (a
clean stop that saves its model); then each node's `rounds.jsonl` is read and OUT/accuracy.png
(held-out accuracy per round, one line per node) and OUT/summary.json are written. The nodes
evaluate on the `test` held-out split (`--split validation` for the one settings were chosen on).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ADDRESS = re.compile(r"listening on (\S+)")


def start(index: int, out: Path, bootstrap: str | None, extra: list[str], split: str) -> subprocess.Popen:
    data = out / f"node-{index}"
    command = [
        sys.executable,
        "-m",
        "swarmp2p.cli",
        "node",
        "--data-dir",
        str(data),
        "--threads",
        "1",
        "--eval-split",
        split,
        *extra,
    ]
    if bootstrap:
        command += ["--bootstrap", bootstrap]
    log = open(out / f"node-{index}.log", "w")  # the child holds it; closed at exit
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)


def wait_for_address(log: Path, process: subprocess.Popen, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"node 1 exited with {process.returncode}; see {log}")
        found = ADDRESS.search(log.read_text(errors="replace")) if log.exists() else None
        if found:
            return found.group(1)
        time.sleep(0.5)
    raise SystemExit(f"node 1 printed no address in {timeout_s:.0f} s; see {log}")


def evaluations(rounds_file: Path) -> list[dict]:
    """The node's evaluations by round; the one it ran before joining (step 0, the base model, only
    in eval.jsonl) is placed at round 0."""
    points = []
    if not rounds_file.exists():
        return points
    before = rounds_file.with_name("eval.jsonl")
    if before.exists():
        lines = before.read_text().splitlines()
        first = json.loads(lines[0]) if lines else {}
        if first.get("step") == 0 and isinstance(first.get("accuracy"), float):
            points.append({"round": 0, "accuracy": first["accuracy"], "step": 0})
    for line in rounds_file.read_text().splitlines():
        record = json.loads(line)
        result = record.get("eval")
        if isinstance(result, dict) and isinstance(result.get("accuracy"), float):
            points.append(
                {"round": record.get("round"), "accuracy": result["accuracy"], "step": result.get("step")}
            )
    return points


def plot(path: Path, curves: dict[str, list[dict]], split: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    values = [p["accuracy"] for points in curves.values() for p in points]
    for name, points in curves.items():
        axis.plot([p["round"] for p in points], [p["accuracy"] for p in points], marker="o", ms=3, label=name)
    if values:
        low, high = min(values), max(values)
        margin = max(0.02, (high - low) * 0.15)
        axis.set_ylim(max(0.0, low - margin), min(1.0, high + margin))
    axis.set_xlabel("round (0: the base model, evaluated before joining)")
    axis.set_ylabel(f"held-out accuracy ({split} split)")
    axis.set_title(f"{len(curves)} local swarmp2p nodes: held-out accuracy per round", fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def stop_nodes(processes: list[subprocess.Popen]) -> None:
    """SIGINT every node still running (a clean stop that saves its model), then wait for all."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    for process in processes:
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()


def run_nodes(args: argparse.Namespace) -> None:
    """Start the nodes, print their latest evaluations every 30 s, SIGINT them all after --minutes."""
    processes: list[subprocess.Popen] = []
    try:
        first = start(1, args.out, None, args.extra, args.split)
        processes.append(first)
        address = wait_for_address(args.out / "node-1.log", first, timeout_s=900)  # may build the model first
        print(f"node 1 listening on {address}", flush=True)
        processes += [start(i, args.out, address, args.extra, args.split) for i in range(2, args.nodes + 1)]
        ends = time.monotonic() + args.minutes * 60
        while time.monotonic() < ends:
            time.sleep(min(30.0, max(0.0, ends - time.monotonic())))
            for index, process in enumerate(processes, 1):
                if process.poll() is not None:
                    raise SystemExit(f"node {index} exited early with {process.returncode}")
            seen = [evaluations(args.out / f"node-{i}" / "rounds.jsonl") for i in range(1, args.nodes + 1)]
            latest = ", ".join(
                f"node {i}: {pts[-1]['accuracy']:.3f}" if pts else f"node {i}: -"
                for i, pts in enumerate(seen, 1)
            )
            print(f"{time.strftime('%H:%M:%S')} held-out accuracy {latest}", flush=True)
    finally:
        stop_nodes(processes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=Path("runs/local-swarm"))
    parser.add_argument("--plot-only", action="store_true", help="only re-read OUT and plot")
    parser.add_argument("--split", choices=("test", "validation"), default="test", help="held-out split")
    parser.add_argument("extra", nargs="*", help="more `swarmp2p node` flags, after --")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    if not args.plot_only:
        run_nodes(args)

    curves = {
        f"node {i}": evaluations(args.out / f"node-{i}" / "rounds.jsonl") for i in range(1, args.nodes + 1)
    }
    plot(args.out / "accuracy.png", curves, args.split)
    summary = {
        name: {
            "evaluations": len(points),
            "first": points[0] if points else None,
            "last": points[-1] if points else None,
            "best": max(points, key=lambda p: p["accuracy"]) if points else None,
        }
        for name, points in curves.items()
    }
    (args.out / "summary.json").write_text(
        json.dumps({"minutes": args.minutes, "nodes": summary}, indent=1) + "\n"
    )
    for name, info in summary.items():
        if info["first"] and info["last"]:
            print(
                f"{name}: round {info['first']['round']} {info['first']['accuracy']:.3f} -> "
                f"round {info['last']['round']} {info['last']['accuracy']:.3f} "
                f"({info['evaluations']} evaluations)"
            )
    print(f"plot: {args.out / 'accuracy.png'}")


if __name__ == "__main__":
    main()
