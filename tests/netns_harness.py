"""Real `swarmp2p node` processes on separate hosts: one Linux network namespace per node, joined
by a userspace switch that adds delay, jitter, loss, a bandwidth limit and partitions.

Why a userspace switch and not `tc qdisc ... netem`: the kernels these tests run on (and CI's)
are built without `sch_netem` (`tc qdisc add ... netem` answers "Specified qdisc kind is
unknown"), while TUN devices and network namespaces are always there. So every namespace gets
one TUN device (`<prefix>-t<i>`, address 10.77.0.<i+1>/24, no default route) and the switch
process holds the other end of every TUN: it reads each IPv4 packet a node sends and, like netem
on that node's egress, drops it (loss, partition) or writes it to the destination's TUN after
the node's delay ± uniform jitter (in order per link, as on a real path) and serialisation at
its bandwidth limit. Packets for any address that is not a swarm namespace are dropped and
counted (`unknown_dst`), so nothing can leave the machine: the namespaces have no other
interface than their loopback and the TUN, and no route beyond 10.77.0.0/24.

Names carry the creating process' pid (`s2p<pid hex>x<n>-...`): runs in parallel never collide,
and a run that died (its pid gone) leaves namespaces the next run removes, processes included.
The TUN devices belong to the switch process and vanish with it; the switch exits when its
stdin closes, i.e. when the process that started it dies.

Used by tests/test_netns_swarm.py, and runnable as a bench that prints a table (as root):

    python tests/netns_harness.py bench --nodes 3 --rounds 6 --delay-ms 50 --jitter-ms 10 --loss 0.02
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import heapq
import json
import os
import random
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SUBNET = "10.77.0"
PREFIX_RE = re.compile(r"^s2p([0-9a-f]+)x(\d+)-")
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def address(index: int) -> str:
    return f"{SUBNET}.{index + 1}"


def missing_requirements() -> str | None:
    """Why the harness cannot run here (None when it can): root, iproute2 and /dev/net/tun."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is missing"
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun is missing (no TUN support)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_names() -> list[str]:
    listing = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


def _delete_namespace(name: str) -> None:
    """Kill whatever still runs in the namespace (only processes a harness started there), then
    remove it."""
    pids = _ip("netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _ip("netns", "del", name, check=False)


def clean_leftovers() -> list[str]:
    """Remove namespaces of harness runs whose process is gone. Returns their names."""
    removed = []
    for name in _netns_names():
        match = PREFIX_RE.match(name)
        if match and not _alive(int(match.group(1), 16)):
            _delete_namespace(name)
            removed.append(name)
    return removed


_RUNS = 0


def new_prefix() -> str:
    global _RUNS
    _RUNS += 1
    return f"s2p{os.getpid():x}x{_RUNS}"


# ---- the switch (runs as its own process: `python tests/netns_harness.py switch PREFIX N`) -----------------


class Impairment:
    """Netem-like settings of one node's egress: delay ± uniform jitter, loss, rate."""

    def __init__(self, delay_ms: float = 0, jitter_ms: float = 0, loss: float = 0, rate_kbit: float = 0):
        self.delay_s = delay_ms / 1000
        self.jitter_s = jitter_ms / 1000
        self.loss = loss
        self.rate_bps = rate_kbit * 1000


class Switch:
    def __init__(self, prefix: str, count: int, seed: int) -> None:
        self.count = count
        self.random = random.Random(seed)
        self.fds: list[int] = []
        self.egress = [Impairment() for _ in range(count)]
        self.blocked: set[tuple[int, int]] = set()
        self.stats = [Counter() for _ in range(count)]
        self.queue: list[tuple[float, int, int, bytes]] = []
        self.sequence = 0
        self.link_last: dict[tuple[int, int], float] = {}
        self.tx_free = [0.0] * count
        for index in range(count):
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
            name = f"{prefix}-t{index}"
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
            self.fds.append(fd)
            namespace = f"{prefix}-n{index}"
            _ip("link", "set", name, "netns", namespace)
            _ip("-n", namespace, "addr", "add", f"{address(index)}/24", "dev", name)
            _ip("-n", namespace, "link", "set", name, "mtu", "1500", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
        self.by_fd = {fd: index for index, fd in enumerate(self.fds)}

    def command(self, line: str) -> dict[str, Any]:
        request = json.loads(line)
        op = request["op"]
        if op == "impair":
            settings = {k: request[k] for k in ("delay_ms", "jitter_ms", "loss", "rate_kbit") if k in request}
            for index in request.get("nodes", range(self.count)):
                self.egress[index] = Impairment(**settings)
        elif op == "partition":  # groups: lists of node indices; no traffic between groups
            group_of = {node: g for g, group in enumerate(request["groups"]) for node in group}
            self.blocked = {
                (a, b)
                for a in range(self.count)
                for b in range(self.count)
                if a != b and group_of.get(a, -1 - a) != group_of.get(b, -1 - b)
            }
        elif op == "heal":
            self.blocked = set()
        elif op != "stats":
            return {"error": f"unknown op {op}"}
        return {"ok": True, "stats": [dict(s) for s in self.stats]}

    def receive(self, source: int, now: float) -> None:
        while True:
            try:
                packet = os.read(self.fds[source], 65536)
            except BlockingIOError:
                return
            stats = self.stats[source]
            if not packet or packet[0] >> 4 != 4:
                stats["not_ipv4"] += 1
                continue
            dst = packet[16:20]
            target = dst[3] - 1
            if bytes(dst[:3]) != bytes(int(x) for x in SUBNET.split(".")) or not 0 <= target < self.count:
                stats["unknown_dst"] += 1  # never forwarded anywhere: nothing leaves the machine
                continue
            if target == source:
                continue
            if (source, target) in self.blocked:
                stats["dropped_partition"] += 1
                continue
            impairment = self.egress[source]
            if impairment.loss and self.random.random() < impairment.loss:
                stats["dropped_loss"] += 1
                continue
            depart = now
            if impairment.rate_bps:
                depart = max(now, self.tx_free[source]) + len(packet) * 8 / impairment.rate_bps
                self.tx_free[source] = depart
            jitter = self.random.uniform(-impairment.jitter_s, impairment.jitter_s)
            due = depart + max(0.0, impairment.delay_s + jitter)
            link = (source, target)
            due = max(due, self.link_last.get(link, 0.0))  # in order per link, like one path
            self.link_last[link] = due
            stats["forwarded"] += 1
            stats["bytes"] += len(packet)
            self.sequence += 1
            heapq.heappush(self.queue, (due, self.sequence, target, packet))

    def deliver(self, now: float) -> None:
        while self.queue and self.queue[0][0] <= now:
            _, _, target, packet = heapq.heappop(self.queue)
            with contextlib.suppress(OSError):  # a namespace being torn down
                os.write(self.fds[target], packet)

    def run(self) -> None:
        control = sys.stdin.fileno()
        os.set_blocking(control, False)
        buffered = b""
        print(json.dumps({"ok": True, "ready": True}), flush=True)
        while True:
            now = time.monotonic()
            timeout = max(0.0, self.queue[0][0] - now) if self.queue else 1.0
            readable, _, _ = select.select([control, *self.fds], [], [], timeout)
            now = time.monotonic()
            for fd in readable:
                if fd == control:
                    chunk = os.read(control, 65536)
                    if not chunk:  # the harness is gone: the TUN devices go with us
                        return
                    buffered += chunk
                    while b"\n" in buffered:
                        line, buffered = buffered.split(b"\n", 1)
                        print(json.dumps(self.command(line.decode())), flush=True)
                else:
                    self.receive(self.by_fd[fd], now)
            self.deliver(time.monotonic())


# ---- the harness --------------------------------------------------------------------------------


class NetnsNetwork:
    """N namespaces joined by the switch. Use as a context manager: everything is removed on exit."""

    def __init__(self, count: int, seed: int = 1) -> None:
        self.count = count
        self.seed = seed
        self.prefix = new_prefix()
        self.namespaces = [f"{self.prefix}-n{i}" for i in range(count)]
        self.switch: subprocess.Popen[str] | None = None

    def __enter__(self) -> NetnsNetwork:
        clean_leftovers()
        try:
            for namespace in self.namespaces:
                _ip("netns", "add", namespace)
            self.switch = subprocess.Popen(
                [sys.executable, __file__, "switch", self.prefix, str(self.count), str(self.seed)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert self.switch.stdout is not None
            ready = self.switch.stdout.readline()
            if not ready:
                raise RuntimeError(f"the switch did not start: {self.switch.stderr.read()}")  # type: ignore[union-attr]
            for namespace in self.namespaces:
                routes = _ip("-n", namespace, "route", "show").stdout
                assert "default" not in routes, f"{namespace} has a default route: {routes}"
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.switch is not None:
            with contextlib.suppress(OSError):
                self.switch.stdin.close()  # type: ignore[union-attr]
            try:
                self.switch.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.switch.kill()
                self.switch.wait()
        for namespace in self.namespaces:
            if namespace in _netns_names():
                _delete_namespace(namespace)

    def _send(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.switch is not None and self.switch.stdin is not None and self.switch.stdout is not None
        self.switch.stdin.write(json.dumps(request) + "\n")
        self.switch.stdin.flush()
        reply = json.loads(self.switch.stdout.readline())
        assert reply.get("ok"), reply
        return reply

    def impair(self, nodes: list[int] | None = None, **settings: float) -> None:
        """Netem-like egress settings (delay_ms, jitter_ms, loss, rate_kbit) of `nodes` (all)."""
        request: dict[str, Any] = {"op": "impair", **settings}
        if nodes is not None:
            request["nodes"] = nodes
        self._send(request)

    def partition(self, *groups: list[int]) -> None:
        self._send({"op": "partition", "groups": [list(g) for g in groups]})

    def heal(self) -> None:
        self._send({"op": "heal"})

    def stats(self) -> list[dict[str, int]]:
        return self._send({"op": "stats"})["stats"]

    def exec_args(self, index: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[index]]


# ---- nodes --------------------------------------------------------------------------------------

TASKS = ("basic_arithmetic", "base_conversion")
DASHBOARD_PORT = 18080  # every namespace has its own loopback: the same port for all


def build_warm_model(root: Path) -> Path:
    """The tiny model after a short supervised warm-up (GRPO groups then have reward variance),
    saved once as a folder every node loads (as tests/test_node_swarm.py does)."""
    from trainer.config import TrainerConfig
    from trainer.policy import TrainerPolicy

    config = TrainerConfig(
        model="tiny",
        data_dir=str(root),
        tasks=TASKS,
        threads=1,
        format_reward=0.5,
        tiny_hidden_size=64,
        tiny_pretrain_steps=0,
    )
    policy = TrainerPolicy(config)
    policy.warmup(40)
    folder = root / "warm-tiny"
    policy.model.save_pretrained(folder)
    policy.tokenizer.save_pretrained(folder)
    return folder


def write_config(path: Path, round_seconds: float, node_settings: dict[str, Any] | None = None) -> Path:
    """The swarm's config file; `node_settings` are extra [node] keys (e.g. fetch_timeout_s)."""
    extra = "".join(f"{key} = {json.dumps(value)}\n" for key, value in (node_settings or {}).items())
    path.write_text(
        f"""
[node]
{extra}round_seconds = {round_seconds}
hello_interval_s = 2.0
questions_per_round = 2
n_local = 2
n_external = 4
max_groups_per_peer = 2

[trainer]
tasks = {json.dumps(list(TASKS))}
threads = 1
format_reward = 0.5
max_new_tokens = 32
"""
    )
    return path


class NetnsNode:
    """One `swarmp2p node` OS process inside namespace `index`, listening on its 10.77.0.x address."""

    def __init__(self, network: NetnsNetwork, index: int, data_dir: Path, config: Path, model: Path) -> None:
        self.network = network
        self.index = index
        self.data_dir = data_dir
        self.address = address(index)
        self.args = [
            *network.exec_args(index),
            sys.executable, "-m", "swarmp2p.cli", "node",
            "--config", str(config), "--data-dir", str(data_dir), "--model", str(model),
            "--listen", f"/ip4/{self.address}/tcp/4001",
            "--dashboard-port", str(DASHBOARD_PORT),
            "--eval-every", "0", "--no-eval-before-train",
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, bootstrap: str | None = None) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "node.json").unlink(missing_ok=True)
        self.starts += 1
        log = (self.data_dir / f"stdout-{self.starts}.log").open("wb")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        args = self.args + (["--bootstrap", bootstrap] if bootstrap else [])
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)

    def info(self, timeout_s: float = 120) -> dict[str, Any]:
        path = self.data_dir / "node.json"
        wait_for(lambda: path.exists() or self.exited(), timeout_s, f"{self.data_dir.name} to start")
        assert not self.exited(), f"node exited early:\n{self.output()}"
        return json.loads(path.read_text())

    def rounds(self) -> list[dict[str, Any]]:
        path = self.data_dir / "rounds.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def by_round(self) -> dict[int, dict[str, Any]]:
        return {record["round"]: record for record in self.rounds()}

    def status(self) -> dict[str, Any]:
        """The dashboard's /api/status, read from inside the node's namespace (its loopback)."""
        script = (
            "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
            f"'http://127.0.0.1:{DASHBOARD_PORT}/api/status', timeout=5).read().decode())"
        )
        done = subprocess.run(
            [*self.network.exec_args(self.index), sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode:
            raise RuntimeError(f"status of node {self.index}: {done.stderr[-500:]}")
        return json.loads(done.stdout)

    def exited(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def output(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-3000:] for p in sorted(self.data_dir.glob("stdout-*.log"))
        )

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15) -> int | None:
        if self.process is None or self.exited():
            return self.process.returncode if self.process else None
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.2)


@contextlib.contextmanager
def netns_swarm(
    root: Path,
    count: int,
    model: Path,
    round_seconds: float,
    seed: int = 1,
    node_settings: dict[str, Any] | None = None,
    **impairment: float,
) -> Iterator[tuple[NetnsNetwork, list[NetnsNode]]]:
    """`count` nodes, each in its own namespace, node 0 the bootstrap; impairment applied to
    every node's egress before any node starts. Everything is stopped and removed on exit."""
    config = write_config(root / "swarm.toml", round_seconds, node_settings)
    with NetnsNetwork(count, seed=seed) as network:
        if impairment:
            network.impair(**impairment)
        nodes = [NetnsNode(network, i, root / f"node{i}", config, model) for i in range(count)]
        try:
            nodes[0].start()
            bootstrap = nodes[0].info()["listen_addrs"][0]
            assert bootstrap.startswith(f"/ip4/{address(0)}/"), bootstrap
            for node in nodes[1:]:
                node.start(bootstrap)
            for node in nodes[1:]:
                node.info()
            yield network, nodes
        finally:
            for node in nodes:
                node.stop(signal.SIGTERM, timeout_s=10)


def round_table(nodes: list[NetnsNode], rounds: list[int]) -> list[dict[str, Any]]:
    """One row per node over `rounds`: completed, external peers trained on, rejections, drops."""
    rows = []
    for node in nodes:
        records = node.by_round()
        chosen = [records[r] for r in rounds if r in records]
        drops = chosen[-1].get("network_drops", {}) if chosen else {}
        rejected: Counter[str] = Counter()
        for record in chosen:
            rejected.update(record["rejected"])
        rows.append(
            {
                "node": node.index,
                "rounds": len(chosen),
                "completed": sum(1 for r in chosen if r["completed"]),
                "skipped": sum(1 for r in chosen if r.get("skipped")),
                # Mean seconds per round of the trainer's generate and train steps: a slow
                # round is CPU-bound when these approach the round length.
                "seconds": {
                    step: round(sum(r.get("seconds", {}).get(step, 0.0) for r in chosen) / len(chosen), 2)
                    for step in ("generate", "train")
                }
                if chosen
                else {},
                "trained_on_per_round": [len(r["external_peers_trained_on"]) for r in chosen],
                "accepted_per_round": [len(r["accepted_peers"]) for r in chosen],
                "rejected": dict(rejected),
                "drops": {k: v for k, v in drops.items() if v},
            }
        )
    return rows


def swarm_report(nodes: list[NetnsNode]) -> str:
    lines = []
    for node in nodes:
        state = "not started" if node.process is None else f"exit code {node.process.poll()}"
        lines.append(f"===== node {node.index} {node.address} ({state})")
        for record in node.rounds():
            lines.append(
                f"  round {record['round']:>3} {'done' if record['completed'] else 'NOT COMPLETED'}"
                f" accepted {len(record['accepted_peers'])} trained_on"
                f" {len(record['external_peers_trained_on'])} peers {record.get('peers')}"
                f" rejected {record['rejected']} drops"
                f" { ({k: v for k, v in record.get('network_drops', {}).items() if v}) }"
            )
        lines.append(node.output())
    return "\n".join(lines)


# ---- the bench ----------------------------------------------------------------------------------


def bench(args: argparse.Namespace) -> None:
    import tempfile

    impairment = {
        "delay_ms": args.delay_ms,
        "jitter_ms": args.jitter_ms,
        "loss": args.loss,
        "rate_kbit": args.rate_kbit,
    }
    with tempfile.TemporaryDirectory(prefix="netns-bench-") as tmp:
        root = Path(tmp)
        model = build_warm_model(root / "model")
        node_settings = {key: json.loads(value) for key, value in (item.split("=", 1) for item in args.set)}
        swarm = netns_swarm(
            root, args.nodes, model, args.round_seconds, node_settings=node_settings, **impairment
        )
        with swarm as (network, nodes):
            wait_for(lambda: all(node.rounds() for node in nodes), 180, "every node's first round")
            first = max(node.rounds()[0]["round"] for node in nodes) + 1
            rounds = list(range(first, first + args.rounds))
            partitioned: list[int] = []
            snapshots: dict[str, list[dict[str, Any]]] = {}
            if args.partition_rounds:
                # Node N-1 cut off for partition_rounds rounds from the start of round `first`.
                partitioned = list(range(first, first + args.partition_rounds))
                genesis = nodes[0].info()["schedule"]
                start_s = (genesis["genesis_ms"] + first * genesis["round_ms"]) / 1000
                time.sleep(max(0.0, start_s - time.time()))
                before = [node.status() for node in nodes]
                network.partition(list(range(args.nodes - 1)), [args.nodes - 1])
                time.sleep(args.partition_rounds * genesis["round_ms"] / 1000)
                during = [node.status() for node in nodes]
                network.heal()
                snapshots = {"before": before, "at_heal": during}
            wait_for(
                lambda: all(rounds[-1] in node.by_round() for node in nodes),
                (args.rounds + 3) * args.round_seconds + 60,
                f"round {rounds[-1]} everywhere",
            )
            statuses = [node.status() for node in nodes]
            result = {
                "command": " ".join(sys.argv),
                "impairment": impairment,
                "node_settings": node_settings,
                "round_seconds": args.round_seconds,
                "rounds": rounds,
                "partitioned_rounds": partitioned,
                "nodes": round_table(nodes, rounds),
                "switch": network.stats(),
                "connected_peers": [s["network"]["connected_peers"] for s in statuses],
            }
            snapshots["end"] = statuses
            result["status"] = {
                moment: [
                    {
                        "connected_peers": s["network"]["connected_peers"],
                        "known_peers": s["network"]["known_peers"],
                        "drops": {k: v for k, v in s["network"]["drops"].items() if v},
                        "rejections": {k: v for k, v in s.get("rejections", {}).items() if v},
                    }
                    for s in taken
                ]
                for moment, taken in snapshots.items()
            }
            print(json.dumps(result, indent=1))
            if args.verbose:
                print(swarm_report(nodes), file=sys.stderr)


def markdown_table(results: list[dict[str, Any]]) -> str:
    """One row per bench result (its JSON output): the table in docs/reliability.md."""

    def conditions(result: dict[str, Any]) -> str:
        i = result["impairment"]
        text = f"{i['delay_ms']:g} ± {i['jitter_ms']:g} ms, {i['loss'] * 100:g}% loss"
        if i["rate_kbit"]:
            text += f", {i['rate_kbit']:g} kbit/s"
        for key, value in result.get("node_settings", {}).items():
            text += f"; {key} {value}"
        if result["partitioned_rounds"]:
            text += f"; last node cut off {len(result['partitioned_rounds'])} rounds"
        return text

    def round_seconds(result: dict[str, Any]) -> float:
        if "round_seconds" in result:
            return float(result["round_seconds"])
        words = result["command"].split()  # outputs from before the key existed
        return float(words[words.index("--round-seconds") + 1]) if "--round-seconds" in words else 10.0

    def counts(merged: Counter[str]) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(merged.items())) or "0"

    lines = [
        "| conditions (one-way, per node) | nodes | round | rounds | completed | external peers trained on"
        " per round (per node) | rejections | network drops | switch: forwarded / lost / cut |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        nodes = result["nodes"]
        rejected: Counter[str] = Counter()
        drops: Counter[str] = Counter()
        for row in nodes:
            rejected.update(row["rejected"])
            drops.update(row["drops"])
        trained = " / ".join("".join(str(n) for n in row["trained_on_per_round"]) for row in nodes)
        switch = result["switch"]
        forwarded, lost, cut = (
            sum(s.get(k, 0) for s in switch) for k in ("forwarded", "dropped_loss", "dropped_partition")
        )
        lines.append(
            f"| {conditions(result)} | {len(nodes)} | {round_seconds(result):g} s"
            f" | {result['rounds'][0]}–{result['rounds'][-1]}"
            f" | {sum(r['completed'] for r in nodes)}/{sum(r['rounds'] for r in nodes)}"
            f" | {trained} | {counts(rejected)} | {counts(drops)} | {forwarded} / {lost} / {cut} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    switch = sub.add_parser("switch", help="(internal) the packet switch of one harness run")
    switch.add_argument("prefix")
    switch.add_argument("count", type=int)
    switch.add_argument("seed", type=int)
    run = sub.add_parser("bench", help="run a swarm under the given conditions and print its table")
    run.add_argument("--nodes", type=int, default=3)
    run.add_argument("--rounds", type=int, default=6)
    run.add_argument("--round-seconds", type=float, default=10.0)
    run.add_argument("--delay-ms", type=float, default=0.0)
    run.add_argument("--jitter-ms", type=float, default=0.0)
    run.add_argument("--loss", type=float, default=0.0)
    run.add_argument("--rate-kbit", type=float, default=0.0)
    run.add_argument("--partition-rounds", type=int, default=0, help="cut the last node off this many rounds")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="extra [node] setting, e.g. fetch_timeout_s=20",
    )
    run.add_argument("--verbose", action="store_true")
    sub.add_parser("clean", help="remove namespaces left by harness runs that died")
    table = sub.add_parser("table", help="the markdown table of bench outputs (JSON files)")
    table.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    if args.command == "switch":
        Switch(args.prefix, args.count, args.seed).run()
    elif args.command == "table":
        print(markdown_table([json.loads(path.read_text()) for path in args.files]))
    elif args.command == "clean":
        print("\n".join(clean_leftovers()) or "nothing left over")
    else:
        reason = missing_requirements()
        if reason:
            sys.exit(f"cannot run: {reason}")
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        bench(args)


if __name__ == "__main__":
    main()
