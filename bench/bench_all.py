"""The figures side by side in one run: CPU generation tokens/s (ours vs plain `generate`
vs TRL), node start-up with a cached model (address line, first round line), and simulator
wall / CPU / peak memory for 100x100, 1000x50 and 10,000x20.

Each part is its own script run as a subprocess (bench_generation.py, bench_startup.py,
bench_simulator.py) writing JSON; this prints one summary. Sizes past `--sim-cap-s` are stopped
and extrapolated from their measured per-round cost (bench_simulator's "capped" rows); a size
whose memory passes `--sim-max-rss-mib` is stopped and marked.

    python bench/bench_all.py                                   # everything (long: ~30 min+)
    python bench/bench_all.py --skip generation,startup --sim-sizes 100x100
    python bench/bench_all.py --cache ~/.cache                  # start-up with an existing model cache
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def run_part(script: str, args: list[str], out: Path) -> Any:
    command = [sys.executable, str(HERE / script), *args, "--json", str(out)]
    print(f"$ {' '.join(command)}", flush=True)
    finished = subprocess.run(command, cwd=HERE.parent, capture_output=True, text=True)
    if finished.returncode != 0 or not out.exists():
        print(finished.stdout[-2000:] + finished.stderr[-2000:])
        return None
    return json.loads(out.read_text())


def fmt(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--skip", default="", help="comma-separated parts to skip: generation,startup,simulator"
    )
    parser.add_argument("--generation-args", default="", help="extra bench_generation.py arguments")
    parser.add_argument("--cache", default="", help="XDG_CACHE_HOME holding a built tiny model (start-up)")
    parser.add_argument("--sim-sizes", default="100x100,1000x50,10000x20")
    parser.add_argument(
        "--sim-workers", default="1,2", help="worker process counts to run each simulator size with"
    )
    parser.add_argument("--sim-cap-s", type=float, default=600.0)
    parser.add_argument("--sim-max-rss-mib", type=float, default=8192.0)
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    tmp = Path(tempfile.mkdtemp(prefix="bench-all-"))
    load_before = os.getloadavg()[0]

    generation = startup = simulator = None
    if "generation" not in skip:
        generation = run_part("bench_generation.py", args.generation_args.split(), tmp / "generation.json")
    if "startup" not in skip:
        extra = ["--cache", args.cache] if args.cache else []
        startup = run_part("bench_startup.py", extra, tmp / "startup.json")
    if "simulator" not in skip:
        simulator = run_part(
            "bench_simulator.py",
            [
                "--sizes",
                args.sim_sizes,
                "--cap-s",
                str(args.sim_cap_s),
                "--max-rss-mib",
                str(args.sim_max_rss_mib),
                "--workers",
                args.sim_workers,
            ],
            tmp / "simulator.json",
        )

    print()
    print(f"== benchmarks (load {load_before:.2f} before, {os.getloadavg()[0]:.2f} after) ==")
    if generation:
        for unit, key, ratio in (
            ("s", "tokens_per_s", "vs_ours"),
            ("CPU-s", "tokens_per_cpu_s", "cpu_vs_ours"),
        ):
            print(f"\ngeneration on CPU (completion tokens per {unit}; x ours)")
            print(f"{'model':<28} {'ours':>8} {'generate':>17} {'trl':>17}")
            for model in dict.fromkeys(row["model"] for row in generation):
                by = {row["method"]: row for row in generation if row["model"] == model}
                cells = [f"{by['ours'][key]:>8.1f}"] + [
                    f"{by[m][key]:>9.1f} ({by[m][ratio]:.2f}x)" for m in ("generate", "trl")
                ]
                print(f"{model:<28} {' '.join(cells)}")
    if startup:
        print("\nnode start-up (s from `swarmp2p node`; target: first round line within 10 s, cached model)")
        print(f"{'run':<8} {'address':>8} {'playing':>8} {'first round':>12} {'first played':>13}")
        for name, result in startup.items():
            print(
                f"{name:<8} {fmt(result['address_s']):>8} {fmt(result.get('playing_s')):>8} "
                f"{fmt(result['first_round_s']):>12} {fmt(result.get('first_played_s')):>13}"
            )
    if simulator:
        print("\nsimulator (fetch_sample 8, seed 1; targets: 1000x50 <= 120 s, 10000x20 within 8 GiB)")
        print(
            f"{'size':<10} {'workers':>7} {'status':<20} {'wall s':>14} {'CPU s':>14} {'CPU s/round':>12} "
            f"{'peak MiB':>9}"
        )
        for row in simulator:
            size = f"{row['peers']}x{row['rounds']}"
            workers = row.get("workers", 1)
            if row["capped"]:
                why = "over memory" if row.get("over_memory") else "capped"
                status = f"{why} {row['rounds_done']}/{row['rounds']}"
                wall = f"{row['wall_s']:.0f} (~{fmt(row.get('est_wall_s'), '.0f')})"
                cpu = f"{row['cpu_s']:.0f} (~{fmt(row.get('est_cpu_s'), '.0f')})"
            else:
                status, wall, cpu = "done", f"{row['wall_s']:.1f}", f"{row['cpu_s']:.1f}"
            print(
                f"{size:<10} {workers:>7} {status:<20} {wall:>14} {cpu:>14} "
                f"{fmt(row.get('cpu_per_round_s'), '.2f'):>12} {row['peak_mib']:>9.0f}"
            )
        print(
            "(~N: extrapolated from the per-round cost measured before the cap; CPU and memory of all "
            "of a run's processes)"
        )


if __name__ == "__main__":
    main()
