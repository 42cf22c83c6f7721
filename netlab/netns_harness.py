"""Real `swarmp2p node` processes on separate hosts: one Linux network namespace per node, joined
by a userspace switch that adds delay, jitter, loss, a bandwidth limit and partitions.

Why a userspace switch and not `tc qdisc ... netem`: the kernels these tests run on (and CI's)
are built without `sch_netem` (`tc qdisc add ... netem` answers "Specified qdisc kind is
unknown"), while TUN devices and network namespaces are always there. So every namespace gets
one TUN device (`<prefix>-t<i>`, address 10.77.0.<i+1>/24, no default route) and the switch
process holds the other end of every TUN: it reads each IPv4 packet a node sends and, like netem
on that node's egress, drops it (loss, partition) or writes it to the destination's TUN after
the node's delay ± uniform jitter (in order per link, as on a real path) and serialisation at
its bandwidth limit. The TUN devices take TCP segmentation offload as a NIC would (up to 64 KB
a packet, loss still drawn per 1500-byte segment: `Switch`). Packets for any address that is
not a swarm namespace are dropped and counted (`unknown_dst`), so nothing can leave the
machine: the namespaces have no other interface than their loopback and the TUN, and no route
beyond 10.77.0.0/24.

Names carry the creating process' pid (`s2p<pid hex>x<n>-...`): runs in parallel never collide,
and a run that died (its pid gone) leaves namespaces the next run removes, processes included.
The TUN devices belong to the switch process and vanish with it; the switch exits when its
stdin closes, i.e. when the process that started it dies.

Used by tests/net/test_netns_swarm.py and tests/net/test_netns_nemesis.py (the nemesis: SIGKILL +
restart, SIGSTOP past a round, a split into groups, and the batch ledger check), and runnable
as a bench that prints a table (as root):

    python netlab/netns_harness.py bench --nodes 3 --rounds 6 --delay-ms 50 --jitter-ms 10 --loss 0.02
    python netlab/netns_harness.py bench --nodes 3 --delay-ms 50 --jitter-ms 10 --loss 0.02 --nemesis kill
    python netlab/netns_harness.py table b.json k.json
    python netlab/netns_harness.py stall --libp2p --cut-s 30   # a connection after a heal
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
TUNSETOFFLOAD = 0x400454D0
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUN_F_CSUM = 0x01
TUN_F_TSO4 = 0x02
VNET = struct.Struct("<BBHHHH")  # virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset
GSO_NONE = 0
TCP_FIN, TCP_PSH, TCP_CWR = 0x01, 0x08, 0x80


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


# ---- the switch (runs as its own process: `python netlab/netns_harness.py switch PREFIX N`) -------------


class Impairment:
    """Netem-like settings of one node's egress: delay ± uniform jitter, loss, rate."""

    def __init__(self, delay_ms: float = 0, jitter_ms: float = 0, loss: float = 0, rate_kbit: float = 0):
        self.delay_s = delay_ms / 1000
        self.jitter_s = jitter_ms / 1000
        self.loss = loss
        self.rate_bps = rate_kbit * 1000


LATE_US = 1000  # a delivery later than this past its due time is counted as late


def take_wire_priority() -> str:
    """Run the switch ahead of the nodes: real-time (SCHED_FIFO), else nice -20, else as is.
    Returns which.

    netem runs in the kernel, which serves packets before any process; our switch is a
    process among the nodes it connects. At the same priority, a round's burst (20 nodes
    busy on 2 cores) left it one runnable process of 21: packets waited for it on the way in
    and out, a delay nobody configured, counted per node as `late_over_1ms` / `late_max_us`.
    The switch's own work is small (a few CPU-seconds a run), so running it first costs the
    nodes little; the kernel still keeps 5% of each second for others
    (`kernel.sched_rt_runtime_us`)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        return "fifo"
    except (OSError, AttributeError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -20)
        return "nice -20"
    except OSError:
        return "normal"


READ_BYTES = 1 << 17  # more than a 64 KB offloaded packet and its virtio-net header


def _tcp_header_end(ip: bytes | memoryview) -> int:
    ihl = (ip[0] & 0x0F) * 4
    return ihl + (ip[ihl + 12] >> 4) * 4


def gso_segments(packet: bytes) -> int:
    """How many MTU-sized segments an offloaded packet (virtio-net header + IPv4) stands for."""
    _, gso_type, _, gso_size, _, _ = VNET.unpack_from(packet)
    if gso_type == GSO_NONE or not gso_size:
        return 1
    payload = len(packet) - VNET.size - _tcp_header_end(memoryview(packet)[VNET.size :])
    return max(1, -(-payload // gso_size))


def wire_bytes(packet: bytes, offloaded: bool) -> int:
    """The bytes a packet puts on the 1500-byte wire: an offloaded one repeats its IP and TCP
    headers on every segment (what a bandwidth limit serialises)."""
    if not offloaded:
        return len(packet)
    segments = gso_segments(packet)
    headers = _tcp_header_end(memoryview(packet)[VNET.size :]) if segments > 1 else 0
    return len(packet) - VNET.size + (segments - 1) * headers


def _ipv4_checksum(header: bytes | bytearray) -> int:
    total = sum(int.from_bytes(header[i : i + 2], "big") for i in range(0, len(header), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _tcp_piece(packet: bytes, first: int, end: int, count: int) -> bytes:
    """Segments [first, end) of an offloaded TCP packet of `count` segments, as one packet: what
    the far side's segmentation would have made of them. Its checksum stays partial (the
    virtio-net header says so), which the receiving kernel accepts as a NIC's."""
    flags, gso_type, hdr_len, gso_size, csum_start, csum_offset = VNET.unpack_from(packet)
    ip = memoryview(packet)[VNET.size :]
    ihl = (ip[0] & 0x0F) * 4
    headers = _tcp_header_end(ip)
    header = bytearray(ip[:headers])
    size = gso_size or len(ip) - headers  # a packet that is not offloaded is one segment
    payload = ip[headers + first * size : headers + end * size]
    header[2:4] = (headers + len(payload)).to_bytes(2, "big")
    header[4:6] = ((int.from_bytes(header[4:6], "big") + first) & 0xFFFF).to_bytes(2, "big")
    header[10:12] = b"\0\0"
    header[10:12] = _ipv4_checksum(header[:ihl]).to_bytes(2, "big")
    sequence = int.from_bytes(header[ihl + 4 : ihl + 8], "big")
    header[ihl + 4 : ihl + 8] = ((sequence + first * size) & 0xFFFFFFFF).to_bytes(4, "big")
    if end < count:  # FIN and PSH belong to the last segment, CWR to the first (tcp_gso_segment)
        header[ihl + 13] &= ~(TCP_FIN | TCP_PSH) & 0xFF
    if first > 0:
        header[ihl + 13] &= ~TCP_CWR & 0xFF
    several = end - first > 1
    vnet = VNET.pack(
        flags, gso_type if several else GSO_NONE, hdr_len if several else 0, gso_size if several else 0,
        csum_start, csum_offset,
    )  # fmt: skip
    return vnet + bytes(header) + bytes(payload)


def surviving_runs(packet: bytes, lost: list[bool]) -> list[bytes]:
    """An offloaded TCP packet less its lost segments (`lost`, one flag per segment): one packet
    per run of consecutive surviving segments, in order."""
    count = len(lost)
    runs: list[bytes] = []
    first = 0
    for index in range(count + 1):
        if index == count or lost[index]:
            if index > first:
                runs.append(_tcp_piece(packet, first, index, count))
            first = index + 1
    return runs


class Switch:
    """Reads every node's packets from its TUN and writes them to the destination's after the
    sender's impairment.

    With `offload` (the default) the TUN devices take TCP segmentation offload, as a NIC does:
    a node's kernel sends up to 64 KB of one TCP connection as one packet (a virtio-net header
    says the segment size) and the destination's kernel takes it whole (as GRO would). The wire
    is still 1500 bytes: TCP's windows count MTU-sized segments, loss is drawn per segment,
    and a packet that loses segments is cut into the runs that survive (`surviving_runs`).
    Per 1500-byte packet, this Python switch moved ~70 MB/s on 2 cores and delivered ~6,000
    packets of a 5 x 1 MB run more than 1 ms late; offloaded, none (docs/benchmarks.md). Two
    namespaces pushing each other 1 MB six times: 2,422 packets instead of 11,953
    (bench/tcp_floor.py --procs 2 ... --netns, with and without --switch-per-packet)."""

    def __init__(self, prefix: str, count: int, seed: int, offload: bool = True) -> None:
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
        self.offload = offload
        for index in range(count):
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
            name = f"{prefix}-t{index}"
            flags = IFF_TUN | IFF_NO_PI | (IFF_VNET_HDR if offload else 0)
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), flags))
            if offload:
                # The node's kernel hands us TCP as it would hand a NIC with TSO: up to 64 KB a
                # packet, cut into MTU-sized segments only on the far side. See `Switch`.
                fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4)
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
                packet = os.read(self.fds[source], READ_BYTES)
            except BlockingIOError:
                return
            stats = self.stats[source]
            ip = memoryview(packet)[VNET.size :] if self.offload else memoryview(packet)
            if len(ip) < 20 or ip[0] >> 4 != 4:
                stats["not_ipv4"] += 1
                continue
            dst = ip[16:20]
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
            segments = gso_segments(packet) if self.offload else 1
            packets = [packet]
            if impairment.loss:
                lost = [self.random.random() < impairment.loss for _ in range(segments)]
                if any(lost):
                    stats["dropped_loss"] += sum(lost)
                    segments -= sum(lost)
                    packets = surviving_runs(packet, lost)
            for piece in packets:
                self._schedule(source, target, piece, now)
            stats["forwarded"] += segments
            stats["packets"] += len(packets)

    def _schedule(self, source: int, target: int, packet: bytes, now: float) -> None:
        impairment = self.egress[source]
        wire = wire_bytes(packet, self.offload)
        depart = now
        if impairment.rate_bps:
            depart = max(now, self.tx_free[source]) + wire * 8 / impairment.rate_bps
            self.tx_free[source] = depart
        jitter = self.random.uniform(-impairment.jitter_s, impairment.jitter_s)
        due = depart + max(0.0, impairment.delay_s + jitter)
        link = (source, target)
        due = max(due, self.link_last.get(link, 0.0))  # in order per link, like one path
        self.link_last[link] = due
        self.stats[source]["bytes"] += wire
        self.sequence += 1
        heapq.heappush(self.queue, (due, self.sequence, source, target, packet))

    def deliver(self, now: float) -> None:
        while self.queue and self.queue[0][0] <= now:
            due, _, source, target, packet = heapq.heappop(self.queue)
            # How late the wire was: a packet delivered after its due time waited for the
            # switch itself (a busy machine), a delay nobody configured.
            late_us = round((now - due) * 1e6)
            stats = self.stats[source]
            if late_us > LATE_US:
                stats["late_over_1ms"] += 1
            if late_us > stats["late_max_us"]:
                stats["late_max_us"] = late_us
            with contextlib.suppress(OSError):  # a namespace being torn down
                os.write(self.fds[target], packet)

    def run(self) -> None:
        control = sys.stdin.fileno()
        os.set_blocking(control, False)
        buffered = b""
        scheduling = take_wire_priority()
        print(json.dumps({"ok": True, "ready": True, "scheduling": scheduling}), flush=True)
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

    def __init__(self, count: int, seed: int = 1, offload: bool = True) -> None:
        self.count = count
        self.seed = seed
        self.offload = offload  # the switch takes TCP segmentation offload (see `Switch`)
        self.prefix = new_prefix()
        self.namespaces = [f"{self.prefix}-n{i}" for i in range(count)]
        self.switch: subprocess.Popen[str] | None = None
        self.switch_scheduling = ""  # take_wire_priority's answer, once the switch runs

    def __enter__(self) -> NetnsNetwork:
        clean_leftovers()
        try:
            for namespace in self.namespaces:
                _ip("netns", "add", namespace)
            self.switch = subprocess.Popen(
                [sys.executable, __file__, "switch", self.prefix, str(self.count), str(self.seed)]
                + ([] if self.offload else ["--no-offload"]),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert self.switch.stdout is not None
            ready = self.switch.stdout.readline()
            if not ready:
                raise RuntimeError(f"the switch did not start: {self.switch.stderr.read()}")  # type: ignore[union-attr]
            self.switch_scheduling = json.loads(ready).get("scheduling", "normal")
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

    def tune_tcp(self, *, initcwnd: int = 0, restart_after_idle: bool = True) -> None:
        """Host TCP settings inside every namespace of this network (never the machine's own):
        `initcwnd` segments (also the initial receive window) on the route to the other nodes,
        and `restart_after_idle` False sets `net.ipv4.tcp_slow_start_after_idle=0`, so a
        connection keeps its congestion window over the idle time between rounds. What an
        operator of a host that moves big batches over long links can set; the node cannot
        (bench_network.py `--host-tcp`)."""
        for index, namespace in enumerate(self.namespaces):
            if not restart_after_idle:
                _ip("netns", "exec", namespace, "sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0")
            if initcwnd:
                window = str(initcwnd)
                _ip(
                    "-n", namespace, "route", "change", f"{SUBNET}.0/24", "dev", f"{self.prefix}-t{index}",
                    "proto", "kernel", "scope", "link", "src", address(index),
                    "initcwnd", window, "initrwnd", window,
                )  # fmt: skip

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
    saved once as a folder every node loads (as tests/node/test_node_swarm.py does)."""
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


def write_config(
    path: Path,
    round_seconds: float,
    node_settings: dict[str, Any] | None = None,
    trainer_settings: dict[str, Any] | None = None,
) -> Path:
    """The swarm's config file; `node_settings` and `trainer_settings` are extra [node] and
    [trainer] keys (e.g. fetch_timeout_s, eval_questions)."""
    extra = "".join(f"{key} = {json.dumps(value)}\n" for key, value in (node_settings or {}).items())
    trainer = "".join(f"{key} = {json.dumps(value)}\n" for key, value in (trainer_settings or {}).items())
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
{trainer}"""
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
        self.process.send_signal(signal.SIGCONT)  # a paused node could not act on SIGTERM
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None

    # ---- nemesis actions ----
    # `ip netns exec` execs the node in place (no fork), so these signals reach the node itself.

    def kill(self) -> int:
        """SIGKILL: no shutdown, no final save; what a power cut or the OOM killer does."""
        assert self.process is not None and not self.exited(), "node not running"
        self.process.send_signal(signal.SIGKILL)
        return self.process.wait(timeout=30)

    def restart(self, bootstrap: str | None) -> None:
        """Start again on the same data dir: same identity key, checkpoints and rounds.jsonl."""
        assert self.exited(), "restart a node that is still running"
        self.start(bootstrap)

    def pause(self) -> None:
        """SIGSTOP: the process (all its threads) is frozen; its sockets stay open."""
        assert self.process is not None and not self.exited(), "node not running"
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None and not self.exited(), "node not running"
        self.process.send_signal(signal.SIGCONT)

    def trained_steps(self) -> list[int]:
        """The trainer's step after each round's update (train_metrics.step), in log order."""
        return [
            int(r["train_metrics"]["step"]) for r in self.rounds() if "step" in r.get("train_metrics", {})
        ]


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
    trainer_settings: dict[str, Any] | None = None,
    **impairment: float,
) -> Iterator[tuple[NetnsNetwork, list[NetnsNode]]]:
    """`count` nodes, each in its own namespace, node 0 the bootstrap; impairment applied to
    every node's egress before any node starts. Everything is stopped and removed on exit."""
    config = write_config(root / "swarm.toml", round_seconds, node_settings, trainer_settings)
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


def published_digests(nodes: list[NetnsNode]) -> dict[str, dict[int, str]]:
    """Sender peer id -> round -> the digest of the batch it recorded publishing."""
    published: dict[str, dict[int, str]] = {}
    for node in nodes:
        for record in node.rounds():
            if record.get("batch_digest"):
                published.setdefault(record["peer_id"], {})[record["round"]] = record["batch_digest"]
    return published


def ledger_of_record(
    record: dict[str, Any], published: dict[str, dict[int, str]], tally: Counter[str]
) -> list[str]:
    """One round record's batches: each accepted digest in the training update or with a
    reason (tallied as "trained" or by reason), and the one its sender published. Returns the
    violations."""
    r, taken, untrained = record["round"], set(record["trained_batches"]), record["untrained_batches"]
    accepted = record["accepted_batches"]
    violations = [f"round {r}: trained {d[:12]}, never accepted" for d in taken - set(accepted.values())]
    for sender, digest in accepted.items():
        tally["accepted"] += 1
        own = published.get(sender, {}).get(r)
        if not digest or (own is not None and own != digest):
            violations.append(f"round {r}: {sender[-6:]}'s batch {digest[:12]} is not its published {own}")
        if (digest in taken) == (digest in untrained):
            state = "trained and untrained" if digest in taken else "lost (neither trained nor untrained)"
            violations.append(f"round {r}: {digest[:12]} {state}")
        tally["trained" if digest in taken else untrained.get(digest, "lost")] += 1
    return violations


def batch_ledger(nodes: list[NetnsNode]) -> dict[str, Any]:
    """Every batch every node accepted, followed through the node's rounds.jsonl (across all
    its starts): in exactly one training update or with a recorded reason not to be
    (swarmp2p.round_record.UNTRAINED), never trained twice, never neither, and the batch its
    sender recorded publishing for that round. Returns the tally and the violations (none when
    the ledger balances)."""
    published = published_digests(nodes)
    tally: Counter[str] = Counter()
    violations: list[str] = []
    for node in nodes:
        trained_in: dict[str, list[int]] = {}
        for record in node.rounds():
            found = ledger_of_record(record, published, tally)
            violations += [f"node {node.index} {text}" for text in found]
            for digest in record["trained_batches"]:
                trained_in.setdefault(digest, []).append(record["round"])
        twice = {digest: rounds for digest, rounds in trained_in.items() if len(rounds) > 1}
        violations += [f"node {node.index}: {d[:12]} trained in rounds {rs}" for d, rs in twice.items()]
    return {"tally": dict(tally), "violations": violations}


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


# ---- the nemesis: kill + restart, pause past a round, split in two groups ---------------------
# Each action runs at a set point of a round (from the swarm's schedule, not from logs) and
# returns what it did; `*_outcome` reads what followed from rounds.jsonl. The test asserts on
# the outcomes, the bench prints them.


def round_start_s(node: NetnsNode, round_number: int) -> float:
    """Wall-clock time (s) round `round_number` starts by the swarm's schedule."""
    schedule = node.info()["schedule"]
    return (schedule["genesis_ms"] + round_number * schedule["round_ms"]) / 1000


def round_at(node: NetnsNode, when_s: float) -> int:
    schedule = node.info()["schedule"]
    return int((when_s * 1000 - schedule["genesis_ms"]) // schedule["round_ms"])


def sleep_until(when_s: float) -> None:
    """The nemesis acts at a time of the schedule: waiting for a wall-clock time is the point."""
    time.sleep(max(0.0, when_s - time.time()))


def next_round(nodes: list[NetnsNode]) -> int:
    return round_at(nodes[0], time.time()) + 1


def kill_and_restart(nodes: list[NetnsNode], index: int, round_number: int, into: float) -> dict[str, Any]:
    """SIGKILL node `index` `into` (a share) of round `round_number` (after it published, before
    it trained), then start it again at once on the same data dir."""
    victim = nodes[index]
    peer_id = victim.info()["peer_id"]
    sleep_until(round_start_s(victim, round_number) + into * victim.info()["schedule"]["round_ms"] / 1000)
    victim.kill()
    killed_s = time.time()
    before = victim.rounds()
    steps = victim.trained_steps()
    victim.restart(nodes[0 if index else 1].info()["listen_addrs"][0])
    info = victim.info()
    return {
        "action": "kill",
        "node": index,
        "round": round_at(victim, killed_s),
        "records_before": len(before),
        "step_before": max(steps, default=0),
        "peer_id_before": peer_id,
        "peer_id_after": info["peer_id"],
        "restart_s": round(time.time() - killed_s, 1),
        "back_round": round_at(victim, time.time()),  # serving its hello again (node.json)
    }


def pause_past_a_round(
    nodes: list[NetnsNode], index: int, round_number: int, into: float, rounds: float
) -> dict[str, Any]:
    """SIGSTOP node `index` `into` round `round_number` for `rounds` round lengths, then SIGCONT."""
    node = nodes[index]
    round_s = node.info()["schedule"]["round_ms"] / 1000
    sleep_until(round_start_s(node, round_number) + into * round_s)
    node.pause()
    paused_s = time.time()
    time.sleep(rounds * round_s)  # frozen for this long: the length of the nemesis itself
    node.resume()
    return {
        "action": "pause",
        "node": index,
        "round": round_at(node, paused_s),
        "resumed_round": round_at(node, time.time()),
        "paused_s": round(time.time() - paused_s, 1),
    }


def split(
    network: NetnsNetwork, nodes: list[NetnsNode], groups: list[list[int]], round_number: int, rounds: int
) -> dict[str, Any]:
    """Partition the swarm into `groups` from the start of `round_number` for `rounds` whole
    rounds, then heal."""
    sleep_until(round_start_s(nodes[0], round_number))
    network.partition(*groups)
    sleep_until(round_start_s(nodes[0], round_number + rounds))
    network.heal()
    return {"action": "split", "groups": groups, "round": round_number, "healed_round": round_number + rounds}


def first_round(
    node: NetnsNode, after: int, last: int, predicate: Callable[[dict[str, Any]], bool]
) -> int | None:
    """The first round in [after, last] whose record satisfies `predicate` (None: none)."""
    records = node.by_round()
    return next((r for r in range(after, last + 1) if r in records and predicate(records[r])), None)


def trained_on_others(record: dict[str, Any]) -> bool:
    return bool(record["completed"] and record["external_peers_trained_on"])


def state_of(record: dict[str, Any] | None) -> str:
    """ "completed", "skipped", "abandoned", or "none" (no record of the round)."""
    if record is None:
        return "none"
    if record["completed"]:
        return "completed"
    return "skipped" if record.get("skipped") else "abandoned"


def kill_rejoin(nodes: list[NetnsNode], event: dict[str, Any], last: int) -> dict[str, Any]:
    """From the records alone (cheap enough to poll): the first round after the kill in which
    the restarted node trained on others, and in which each other node trained on it."""
    victim, peer_id = nodes[event["node"]], event["peer_id_before"]
    restarted = event["round"] + 1  # its batch of the kill round may be fetched before the kill
    return {
        "trains_on_others": first_round(victim, restarted, last, trained_on_others),
        "others_train_on_it": {
            node.index: first_round(
                node, restarted, last, lambda r: peer_id in r["external_peers_trained_on"]
            )
            for node in nodes
            if node is not victim
        },
    }


def kill_outcome(nodes: list[NetnsNode], event: dict[str, Any], last: int) -> dict[str, Any]:
    """After a kill + restart: the restarted node's records keep its peer id, its trainer
    resumed from its checkpoint (the step goes on from before the kill; from scratch it would
    restart at 1), and when it trained on others' and others on its rollouts again."""
    victim, peer_id = nodes[event["node"]], event["peer_id_before"]
    after = victim.rounds()[event["records_before"] :]
    steps = [int(r["train_metrics"]["step"]) for r in after if "step" in r.get("train_metrics", {})]
    return {
        **event,
        "same_peer_id": event["peer_id_after"] == peer_id and all(r["peer_id"] == peer_id for r in after),
        "first_step_after": min(steps, default=None),
        "checkpoint_restored": victim.status()["counters"].get("checkpoint_restored", 0),
        **kill_rejoin(nodes, event, last),
    }


def pause_rejoin(nodes: list[NetnsNode], event: dict[str, Any], last: int) -> dict[str, Any]:
    """From the records alone: the first round after SIGCONT the paused node completed, and the
    first in which it also trained on others."""
    node, resumed = nodes[event["node"]], event["resumed_round"]
    return {
        "caught_up": first_round(node, resumed, last, lambda r: r["completed"]),
        "trains_on_others": first_round(node, resumed, last, trained_on_others),
    }


def pause_outcome(nodes: list[NetnsNode], event: dict[str, Any], last: int) -> dict[str, Any]:
    """After a pause: what the paused node recorded for the rounds it slept through, when it
    completed a round again and trained on others, and whether the others kept going and did
    not ban it for its late messages."""
    node = nodes[event["node"]]
    records = node.by_round()
    missed = range(event["round"], event["resumed_round"] + 1)
    others = [o for o in nodes if o is not node]
    return {
        **event,
        "alive": not node.exited(),
        "missed_rounds": {r: state_of(records.get(r)) for r in missed},
        **pause_rejoin(nodes, event, last),
        "others_completed": {
            o.index: all(o.by_round().get(r, {}).get("completed") for r in missed) for o in others
        },
        "banned_by": [o.index for o in others if node.info()["peer_id"] in o.status()["banned"]],
    }


def split_outcome(nodes: list[NetnsNode], event: dict[str, Any], last: int) -> dict[str, Any]:
    """After a split: within the cut, which rounds each node completed and whether it accepted
    anything from the other side; after the heal, the first round every node completed (they
    converged on it) and the first round from which every node accepted a batch from the other
    side."""
    ids = {node.index: node.info()["peer_id"] for node in nodes}
    side = {index: g for g, group in enumerate(event["groups"]) for index in group}

    def across(node: NetnsNode) -> set[str]:
        return {ids[i] for i in ids if side[i] != side[node.index]}

    inside = range(event["round"] + 1, event["healed_round"])
    healed = event["healed_round"]
    common = next(
        (r for r in range(healed, last + 1) if all(n.by_round().get(r, {}).get("completed") for n in nodes)),
        None,
    )
    exchanged = {
        n.index: first_round(n, healed, last, lambda r, n=n: bool(across(n) & set(r["accepted_peers"])))
        for n in nodes
    }
    return {
        **event,
        "completed_inside": {
            n.index: sum(bool(n.by_round().get(r, {}).get("completed")) for r in inside) for n in nodes
        },
        "crossed_inside": {
            n.index: sum(
                bool(across(n) & set(n.by_round().get(r, {}).get("accepted_peers", ()))) for r in inside
            )
            for n in nodes
        },
        "inside_rounds": list(inside),
        "converged": common,
        "exchanged": exchanged,
    }


OUTCOMES = {"kill": kill_outcome, "pause": pause_outcome, "split": split_outcome}


# ---- TCP after a heal: an old connection stalls in retransmission backoff --------------------

ECHO_SERVER = """
import socket, threading
server = socket.create_server(("10.77.0.2", 9000))
def serve(conn):
    with conn:
        while data := conn.recv(100):
            conn.sendall(data)
while True:
    threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
"""
# One byte a second over one connection (like gossip heartbeats) through the cut; prints how
# long after the heal (argv[1], a wall-clock time) the first echo came back.
STEADY_CLIENT = """
import select, socket, sys, time
heal = float(sys.argv[1])
conn = socket.create_connection(("10.77.0.2", 9000), timeout=10)
conn.setblocking(False)
while time.time() < heal + 120:
    conn.send(b"x")
    if select.select([conn], [], [], 1.0)[0] and conn.recv(100) and time.time() > heal:
        print(round(time.time() - heal, 1))
        break
"""
NEW_CLIENT = """
import socket, time
started = time.time()
socket.create_connection(("10.77.0.2", 9000), timeout=10).close()
print(round(time.time() - started, 2))
"""


def stall_after_heal(cut_s: float, delay_ms: float = 50, jitter_ms: float = 10) -> dict[str, float]:
    """Two hosts, a connection that keeps sending through a `cut_s` partition: seconds from the
    heal until it delivers again, and how long a new connection takes right after the heal.
    Unacked data during the cut doubles TCP's retransmission timeout at every try, so the old
    connection waits for its next retransmission (up to about the cut's length again)."""
    with NetnsNetwork(2) as network:
        server = subprocess.Popen([*network.exec_args(1), sys.executable, "-c", ECHO_SERVER])
        try:
            network.impair(delay_ms=delay_ms, jitter_ms=jitter_ms)
            heal_s = time.time() + 3 + cut_s
            steady = subprocess.Popen(
                [*network.exec_args(0), sys.executable, "-c", STEADY_CLIENT, str(heal_s)],
                stdout=subprocess.PIPE,
                text=True,
            )
            sleep_until(heal_s - cut_s)  # the client is connected and sending by now
            network.partition([0], [1])
            sleep_until(heal_s)
            network.heal()
            fresh = subprocess.run(
                [*network.exec_args(0), sys.executable, "-c", NEW_CLIENT], capture_output=True, text=True
            )
            old, _ = steady.communicate(timeout=150)
        finally:
            server.kill()
        return {"cut_s": cut_s, "old_connection_s": float(old), "new_connection_s": float(fresh.stdout)}


STALL_PEER = str(Path(__file__).with_name("netns_stall_peer.py"))


def libp2p_stall_after_heal(cut_s: float, delay_ms: float = 50, jitter_ms: float = 10) -> dict[str, Any]:
    """The same through swarmp2p.net's adapter (netlab/netns_stall_peer.py): one host gossips to
    the other every 0.5 s through a `cut_s` partition; after the heal it sends requests (3 s
    timeout) until one is answered. Returns the probe's JSON: seconds from the heal to the
    answer, requests that timed out, its drop counters."""
    peer = [sys.executable, STALL_PEER]
    with NetnsNetwork(2) as network:
        network.impair(delay_ms=delay_ms, jitter_ms=jitter_ms)
        server = subprocess.Popen(
            [*network.exec_args(1), *peer, "serve", f"/ip4/{address(1)}/tcp/4001"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            listening = server.stdout.readline().strip()  # type: ignore[union-attr]
            probe = subprocess.Popen(
                [*network.exec_args(0), *peer, "probe", listening],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert probe.stdout is not None and probe.stdout.readline().strip() == "ready"
            network.partition([0], [1])
            time.sleep(cut_s)  # the cut's length is what is measured
            network.heal()
            out, _ = probe.communicate(f"{time.time()}\n", timeout=300)
        finally:
            server.kill()
        return {"cut_s": cut_s, **json.loads(out.splitlines()[-1])}


# ---- the bench ----------------------------------------------------------------------------------


def run_nemesis(
    args: argparse.Namespace, network: NetnsNetwork, nodes: list[NetnsNode], at: int
) -> dict[str, Any]:
    """The bench's one nemesis action, in round `at`: kill node 1 (SIGKILL, 30% into the
    round) and restart it; pause the last node (SIGSTOP, 30% into the round) for
    --pause-rounds round lengths; or split the swarm in halves for --split-rounds rounds."""
    if args.nemesis == "kill":
        return kill_and_restart(nodes, 1, at, into=0.3)
    if args.nemesis == "pause":
        return pause_past_a_round(nodes, len(nodes) - 1, at, into=0.3, rounds=args.pause_rounds)
    half = len(nodes) // 2
    return split(network, nodes, [list(range(half)), list(range(half, len(nodes)))], at, args.split_rounds)


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
            event = run_nemesis(args, network, nodes, first + 1) if args.nemesis else None
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
            if event is not None:
                result["nemesis"] = OUTCOMES[event["action"]](nodes, event, rounds[-1])
                result["ledger"] = batch_ledger(nodes)
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
        if "nemesis" in result:
            text += f"; nemesis {result['nemesis']['action']}"
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


def describe_nemesis(outcome: dict[str, Any]) -> tuple[str, str]:
    """The nemesis table's "action" and "what followed" cells of one bench result."""
    action = outcome["action"]
    if action == "kill":
        taken = ", ".join(f"node {i} from {r}" for i, r in outcome["others_train_on_it"].items())
        return (
            f"node {outcome['node']} SIGKILLed in round {outcome['round']}, restarted at once"
            f" (node.json again after {outcome['restart_s']:g} s)",
            f"same peer id: {'yes' if outcome['same_peer_id'] else 'NO'}; checkpoint restored"
            f" {outcome['checkpoint_restored']}; trainer step {outcome['step_before']} before the kill,"
            f" {outcome['first_step_after']} at its first update after; trains on others from round"
            f" {outcome['trains_on_others']}; others train on it: {taken}",
        )
    if action == "pause":
        missed = ", ".join(f"{r} {state}" for r, state in outcome["missed_rounds"].items())
        kept = all(outcome["others_completed"].values())
        return (
            f"node {outcome['node']} SIGSTOPped in round {outcome['round']} for {outcome['paused_s']:g} s,"
            f" SIGCONT in round {outcome['resumed_round']}",
            f"its rounds: {missed}; completes again from round {outcome['caught_up']}, trains on others"
            f" from {outcome['trains_on_others']}; others completed those rounds: {'yes' if kept else 'NO'};"
            f" banned by: {outcome['banned_by'] or 'nobody'}",
        )
    sides = " / ".join(
        "{" + ",".join(str(i) for i in group) + "}" for group in outcome["groups"]
    )  # no "|": a table cell
    exchanged = ", ".join(f"node {i} from {r}" for i, r in outcome["exchanged"].items())
    crossed = sum(outcome["crossed_inside"].values())
    completed = "/".join(str(n) for n in outcome["completed_inside"].values())
    return (
        f"split {sides} from round {outcome['round']}, healed at round {outcome['healed_round']}",
        f"rounds {outcome['inside_rounds']} inside: completed {completed} (per node), batches across"
        f" the cut {crossed}; all completed round {outcome['converged']} after the heal; accept"
        f" across again: {exchanged}",
    )


def nemesis_table(results: list[dict[str, Any]]) -> str:
    """One row per bench result with a nemesis: what it did, what followed, and the batch
    ledger over every node's whole rounds.jsonl."""
    lines = [
        "| nodes | action | what followed | batches accepted / trained / not trained (why)"
        " | ledger violations |",
        "|---|---|---|---|---|",
    ]
    for result in results:
        if "nemesis" not in result:
            continue
        action, followed = describe_nemesis(result["nemesis"])
        tally = dict(result["ledger"]["tally"])
        accepted, trained = tally.pop("accepted", 0), tally.pop("trained", 0)
        why = ", ".join(f"{k} {v}" for k, v in sorted(tally.items())) or "none"
        violations = "; ".join(result["ledger"]["violations"]) or "0"
        ledger = f"{accepted} / {trained} / {why}"
        lines.append(f"| {len(result['nodes'])} | {action} | {followed} | {ledger} | {violations} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    switch = sub.add_parser("switch", help="(internal) the packet switch of one harness run")
    switch.add_argument("prefix")
    switch.add_argument("count", type=int)
    switch.add_argument("seed", type=int)
    switch.add_argument("--no-offload", action="store_true", help="one 1500-byte packet per read")
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
        "--nemesis",
        choices=("kill", "pause", "split"),
        help="in the second measured round: SIGKILL node 1 and restart it; SIGSTOP the last node"
        " (then SIGCONT); or split the swarm in two halves (then heal)",
    )
    run.add_argument("--pause-rounds", type=float, default=1.5, help="--nemesis pause: round lengths frozen")
    run.add_argument("--split-rounds", type=int, default=2, help="--nemesis split: whole rounds cut")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="extra [node] setting, e.g. fetch_timeout_s=20",
    )
    run.add_argument("--verbose", action="store_true")
    stall = sub.add_parser("stall", help="TCP after a heal: an old connection vs a new one (JSON)")
    stall.add_argument("--cut-s", type=float, default=30.0)
    stall.add_argument("--libp2p", action="store_true", help="through swarmp2p.net's adapter, not plain TCP")
    sub.add_parser("clean", help="remove namespaces left by harness runs that died")
    table = sub.add_parser("table", help="the markdown table of bench outputs (JSON files)")
    table.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    if args.command == "switch":
        Switch(args.prefix, args.count, args.seed, offload=not args.no_offload).run()
    elif args.command == "table":
        results = [json.loads(path.read_text()) for path in args.files]
        print(markdown_table(results))
        if any("nemesis" in result for result in results):
            print()
            print(nemesis_table(results))
    elif args.command == "stall":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        print(json.dumps((libp2p_stall_after_heal if args.libp2p else stall_after_heal)(args.cut_s)))
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
