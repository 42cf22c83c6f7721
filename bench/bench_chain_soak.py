"""Chain soak: a `swarmp2p chain devnet` swarm (2-3 nodes, short stages) for many chain rounds,
sampled per node and per chain round for anything that grows without bound.

    python bench/bench_chain_soak.py --nodes 2 --stage-seconds 4 --rounds 1000 --out runs/chain-soak

The devnet is started through the CLI (anvil chain, contract, funded keys, printed node commands);
the nodes run those printed commands plus a config that makes the tiny model fast on a small host
and a dashboard port, whose `/api/status` gives each node's chain submission counters. Every
`--sample-s` seconds the bench records, per node: RSS and CPU time (/proc), open file descriptors
(/proc/PID/fd), rounds completed (rounds.jsonl) and its failed chain submissions (status `chain`
section: `failed`, plus reverted transactions seen on the chain); and for the chain: the current
round and the gas the nodes' transactions used since the previous sample (every block is read, so
a node's reverted transaction counts as failed even when its client hid it).

`--attack` runs the attack kit's flood (`python -m netlab.attack_kit flood`: throwaway keys'
announcements, junk and wrongly signed gossip at the highest rate the streams take) against every
node for the whole soak, restarted whenever it ends; its output and reports (one JSON line per
5-minute flood: messages sent by kind) go to OUT/attack.log. The kit
places its announcements by a round clock, here set to the chain's round at the soak's start
(chain rounds drift from it: stale announcements are refused all the same).

It writes OUT/chain_soak.jsonl (one row per node per sample), OUT/chain_soak.png and
OUT/summary.json, and prints a table of each series' least-squares slope per 1,000 chain rounds
after `--warmup-rounds`. `--plot-only` re-reads OUT/chain_soak.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from procfs import cpu_seconds, rss_mib
from soak_axes import fit_to_settled
from soak_flood import Flood

from netlab.devnet import FAST_NODE_CONFIG, Devnet

SERIES = ("rss_mib", "cpu_pct", "fds", "gas_per_round", "failed_submissions", "rounds_completed")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def open_fds(pid: int) -> int:
    """How many file descriptors `pid` holds now; 0 once it is gone."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def rounds_completed(rounds_file: Path) -> int:
    if not rounds_file.exists():
        return 0
    return sum(1 for line in rounds_file.read_text().splitlines() if '"completed": true' in line)


def slope_per_1000(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (round, value) points, per 1,000 rounds (0 with fewer than 2
    distinct rounds)."""
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return 0.0
    return 1000 * sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


class ChainWatch:
    """Reads every new block: gas used and reverted transactions of the nodes' accounts."""

    def __init__(self, rpc: str, contract: str, accounts: dict[str, int]) -> None:
        from web3 import HTTPProvider, Web3

        from swarmp2p.chain.artifact import load_artifact

        self.w3 = Web3(HTTPProvider(rpc, request_kwargs={"timeout": 10}))
        self.coordinator = self.w3.eth.contract(address=contract, abi=load_artifact().abi)
        self.accounts = accounts  # lower-case address -> node index
        self.next_block = self.w3.eth.block_number + 1

    def current_round(self) -> int:
        return int(self.coordinator.functions.currentRound().call())

    def new_blocks(self) -> tuple[dict[int, int], dict[int, int]]:
        """(gas used, reverted transactions) per node since the previous call."""
        gas: dict[int, int] = dict.fromkeys(self.accounts.values(), 0)
        reverted: dict[int, int] = dict.fromkeys(self.accounts.values(), 0)
        last = self.w3.eth.block_number
        for number in range(self.next_block, last + 1):
            for tx in self.w3.eth.get_block(number, full_transactions=True)["transactions"]:
                node = self.accounts.get(tx["from"].lower())
                if node is None:
                    continue
                receipt = self.w3.eth.get_transaction_receipt(tx["hash"])
                gas[node] += int(receipt["gasUsed"])
                reverted[node] += int(receipt["status"] == 0)
        self.next_block = last + 1
        return gas, reverted


def node_status(port: int) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=5) as reply:
            return dict(json.loads(reply.read()))
    except (OSError, ValueError):
        return {}


def start_nodes(
    commands: list[list[str]], config: Path, out: Path
) -> list[tuple[subprocess.Popen, Path, int]]:
    started = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for index, words in enumerate(commands, 1):
        port = free_port()
        data_dir = Path(words[words.index("--data-dir") + 1])
        command = [sys.executable, "-m", "swarmp2p.cli", *words[1:], "--config", str(config)]
        command += ["--dashboard-port", str(port), "--dashboard-host", "127.0.0.1"]
        log = (out / f"node-{index}.log").open("w")  # the child holds it; closed at exit
        started.append(
            (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), data_dir, port)
        )
    return started


def run(args: argparse.Namespace, samples_file: Path) -> None:
    devnet = Devnet(args.out / "devnet", args.nodes, "anvil", args.stage_seconds, log=args.out / "devnet.log")
    nodes: list[tuple[subprocess.Popen, Path, int]] = []
    flood: Flood | None = None
    try:
        commands = devnet.node_commands()
        saved = json.loads((args.out / "devnet" / "devnet.json").read_text())
        accounts = {node["address"].lower(): index for index, node in enumerate(saved["nodes"], 1)}
        chain = ChainWatch(saved["rpc"], saved["contract"], accounts)
        config = args.out / "fast.toml"
        config.write_text(FAST_NODE_CONFIG)
        nodes = start_nodes(commands, config, args.out)
        first_round = chain.current_round()
        if args.attack:
            for process, data_dir, _ in nodes:
                while not (data_dir / "node.json").exists():
                    if process.poll() is not None:
                        raise SystemExit(f"a node exited; see {args.out}")
                    time.sleep(1)
            infos = [json.loads((data_dir / "node.json").read_text()) for _, data_dir, _ in nodes]
            round_s = args.stage_seconds  # one stage per chain round (the single-stage game)
            flood = Flood(infos, round_s, time.time() - first_round * round_s, args.out / "attack.log")
        previous: dict[int, tuple[float, float]] = {}
        previous_round = first_round
        reverted_total = dict.fromkeys(accounts.values(), 0)
        began = time.monotonic()
        with samples_file.open("w") as out:
            while True:
                if flood is not None:
                    flood.keep_running()
                time.sleep(args.sample_s)
                now = time.monotonic() - began
                chain_round = chain.current_round() - first_round
                gas, reverted = chain.new_blocks()
                advanced = max(1, chain_round - previous_round)
                for index, (process, data_dir, port) in enumerate(nodes, 1):
                    cpu = cpu_seconds(process.pid)
                    if cpu is None or process.poll() is not None:
                        raise SystemExit(f"node {index} exited; see {args.out}/node-{index}.log")
                    last_s, last_cpu = previous.get(index, (0.0, 0.0))
                    previous[index] = (now, cpu)
                    reverted_total[index] += reverted[index]
                    health = node_status(port).get("chain", {})
                    row = {
                        "node": index,
                        "seconds": round(now, 1),
                        "round": chain_round,
                        "rss_mib": round(rss_mib(process.pid), 1),
                        "cpu_pct": round(100 * (cpu - last_cpu) / max(1e-9, now - last_s), 1),
                        "fds": open_fds(process.pid),
                        "rounds_completed": rounds_completed(data_dir / "rounds.jsonl"),
                        "gas_per_round": round(gas[index] / advanced),
                        "failed_submissions": int(health.get("failed", 0)) + reverted_total[index],
                        "submitted": int(health.get("submitted", 0)),
                    }
                    out.write(json.dumps(row) + "\n")
                out.flush()
                previous_round = chain_round
                print(
                    f"{time.strftime('%H:%M:%S')} chain round {chain_round}: "
                    + ", ".join(f"node {i} {rss_mib(p.pid):.0f} MiB" for i, (p, _, _) in enumerate(nodes, 1)),
                    flush=True,
                )
                if chain_round >= args.rounds or now >= args.max_minutes * 60:
                    break
    finally:
        if flood is not None:
            flood.stop()
        for process, _, _ in nodes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process, _, _ in nodes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        devnet.stop()


def summarize(rows: list[dict[str, Any]], warmup_rounds: int) -> dict[int, dict[str, float]]:
    """Per node: each series' slope per 1,000 chain rounds after the warm-up, and its range."""
    summary: dict[int, dict[str, float]] = {}
    for node in sorted({row["node"] for row in rows}):
        mine = [row for row in rows if row["node"] == node]
        settled = [row for row in mine if row["round"] >= warmup_rounds] or mine[-1:]
        entry: dict[str, float] = {"rounds_reached": mine[-1]["round"]}
        for series in SERIES:
            values = [float(row[series]) for row in settled]
            entry[f"{series}_per_1000"] = slope_per_1000(
                [(row["round"], float(row[series])) for row in settled]
            )
            entry[f"{series}_min"], entry[f"{series}_max"] = min(values), max(values)
        summary[node] = entry
    return summary


def plot(path: Path, rows: list[dict[str, Any]], warmup_rounds: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {
        "rss_mib": "RSS (MiB)",
        "cpu_pct": "CPU (% of a core)",
        "fds": "open fds",
        "gas_per_round": "gas per round",
        "failed_submissions": "failed submissions",
    }
    figure, axes = plt.subplots(len(labels), 1, figsize=(8, 10), sharex=True)
    for node in sorted({row["node"] for row in rows}):
        mine = [row for row in rows if row["node"] == node]
        for axis, series in zip(axes, labels, strict=True):
            axis.plot(
                [row["round"] for row in mine], [row[series] for row in mine], lw=1.0, label=f"node {node}"
            )
    settled_rss = [float(row["rss_mib"]) for row in rows if row["round"] >= warmup_rounds]
    for axis, series, label in zip(axes, labels, labels.values(), strict=True):
        axis.set_ylabel(label, fontsize=8)
        if series == "rss_mib" and settled_rss:
            fit_to_settled(axis, settled_rss, label)
        else:
            axis.set_ylim(bottom=0, top=max(1.0, axis.get_ylim()[1] * 1.1))
        axis.axvline(warmup_rounds, color="grey", ls=":", lw=1)
        axis.grid(alpha=0.3)
    axes[-1].set_xlabel(f"chain rounds (dotted: end of the {warmup_rounds}-round warm-up)")
    axes[0].set_title(f"chain soak: {len({row['node'] for row in rows})} devnet nodes", fontsize=10)
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2, choices=(2, 3))
    parser.add_argument("--stage-seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--max-minutes", type=float, default=24 * 60.0)
    parser.add_argument("--sample-s", type=float, default=30.0)
    parser.add_argument("--warmup-rounds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("runs/chain-soak"))
    parser.add_argument("--attack", action="store_true", help="flood the nodes with the attack kit")
    parser.add_argument("--plot-only", action="store_true")
    args = parser.parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    samples_file = args.out / "chain_soak.jsonl"
    if not args.plot_only:
        run(args, samples_file)
    rows = [json.loads(line) for line in samples_file.read_text().splitlines()]
    summary = summarize(rows, args.warmup_rounds)
    plot(args.out / "chain_soak.png", rows, args.warmup_rounds)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"slope per 1,000 chain rounds after round {args.warmup_rounds}:")
    print("node rounds " + " ".join(f"{series:>20}" for series in SERIES))
    for node, entry in summary.items():
        slopes = " ".join(f"{entry[f'{series}_per_1000']:>+20.1f}" for series in SERIES)
        print(f"{node:>4} {entry['rounds_reached']:>6.0f} {slopes}")
    print(f"{args.out / 'chain_soak.png'}, {args.out / 'summary.json'} (load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
