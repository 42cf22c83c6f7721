"""Node start-up: seconds from `swarmp2p node` to its address line and to its first round line.

Each run starts a real `python -m swarmp2p.cli node` process (a new one-peer swarm, loopback),
timestamps every line it prints, and stops it after its first played round line (or `--cap-s`).
"playing" is the `round N started` line (the node begins its first round), "first round" the
first line that ends a round (played, abandoned or skipped), "first played" the first `round N |`:

- cold:   an empty model cache (the shipped tiny model is checked and copied in; other settings build)
- cached: a fresh data dir, the model cache of the cold run (what a new user's second node sees)
- rejoin: the cached run's data dir again (identity, checkpoint and swarm file already there)

The phases in between (imports, model load, held-out evaluation, waiting for the round) come
from the node's own lines. `--cache DIR` reuses a model cache and skips the cold run.

    python bench/bench_startup.py                       # cold, cached, rejoin
    python bench/bench_startup.py --cache ~/.cache      # cached and rejoin only
    python bench/bench_startup.py --root /path/to/checkout --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

STARTED_LINE = re.compile(r"^round \d+ started\b")  # said once, when the node begins to play
ROUND_LINE = re.compile(r"^round \d+\b(?! started)")  # a round's end: played, abandoned or skipped
PLAYED_LINE = re.compile(r"^round \d+ \|")  # a round the node played to the end


def run_node(root: Path, data_dir: Path, cache_home: Path, args: list[str], cap_s: float) -> dict[str, Any]:
    """Start one node; returns the timestamped lines and the two times that matter."""
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(cache_home),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(root),
    }
    command = [sys.executable, "-m", "swarmp2p.cli", "node", "--data-dir", str(data_dir), *args]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[tuple[float, str]] = []
    found: dict[str, float] = {}
    done = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.rstrip("\n")
            at = time.perf_counter() - started
            lines.append((at, line))
            if "address_s" not in found and line.startswith("listening on "):
                found["address_s"] = at
            if "playing_s" not in found and STARTED_LINE.match(line):
                found["playing_s"] = at
            if "first_round_s" not in found and ROUND_LINE.match(line):
                found["first_round_s"] = at
            if PLAYED_LINE.match(line):
                found["first_played_s"] = at
                done.set()
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    done.wait(cap_s)
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    reader.join(5)
    return {
        "address_s": found.get("address_s"),
        "playing_s": found.get("playing_s"),
        "first_round_s": found.get("first_round_s"),
        "first_played_s": found.get("first_played_s"),
        "lines": [f"{at:7.2f}  {line}" for at, line in lines],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--cache", type=Path, default=None, help="XDG_CACHE_HOME with a built model")
    parser.add_argument("--round-seconds", type=float, default=10.0)
    parser.add_argument("--cap-s", type=float, default=240.0)
    parser.add_argument("--show-lines", action="store_true", help="print every node's timestamped output")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("node_args", nargs="*", help="extra `swarmp2p node` arguments (after --)")
    args = parser.parse_args()
    node_args = ["--round-seconds", str(args.round_seconds), *args.node_args]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="swarmp2p-startup-") as tmp:
        work = Path(tmp)
        cache = args.cache or work / "cache"
        runs = [("cached", work / "a"), ("rejoin", work / "a")]
        if args.cache is None:
            runs.insert(0, ("cold", work / "cold"))
        for name, data_dir in runs:
            print(f"{name}: swarmp2p node --data-dir {data_dir} {' '.join(node_args)}", flush=True)
            results[name] = run_node(args.root, data_dir, cache, node_args, args.cap_s)
            if args.show_lines:
                print("\n".join(results[name]["lines"]))
    print()
    print(f"{'run':<8} {'address s':>10} {'playing s':>10} {'first round s':>14} {'first played s':>15}")
    for name, result in results.items():
        address, playing, first, played = (
            "-" if result.get(key) is None else f"{result[key]:.1f}"
            for key in ("address_s", "playing_s", "first_round_s", "first_played_s")
        )
        print(f"{name:<8} {address:>10} {playing:>10} {first:>14} {played:>15}")
    print(f"(round_seconds {args.round_seconds}; load {os.getloadavg()[0]:.2f})")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
