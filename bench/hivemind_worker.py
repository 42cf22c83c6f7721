"""One peer of the reference stack's round exchange, for bench/bench_hivemind.py.

Runs under hivemind's own Python (its virtual environment), so it imports nothing of
swarmp2p: only the standard library and hivemind. It speaks bench_network.py's file protocol in
`--out` (`addr`, `ready-i`, `start`, `done-i`, `result-i.json`) so the same orchestration and
summary serve both stacks.

What it does is what the reference RL Swarm does with a round's outputs: each peer stores its
batch in hivemind's DHT under key = round, subkey = its peer id, then reads the key
(`get(key, latest=True)`) until it holds every peer's batch. Rounds run one after another, as in
the reference trainer: a peer still waiting on round r stores its round r+1 batch late.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from procfs import cpu_seconds  # this script's folder is on sys.path when run as a script


def proc_children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    return children


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of this process and its descendants: hivemind's DHT runs in a forked process
    that starts the Go p2pd daemon, and most of a peer's work happens in those two."""
    children = proc_children()
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        total += cpu_seconds(pid) or 0.0  # a process gone meanwhile counts nothing
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--procs", type=int, required=True)
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--interval", type=float, required=True)
    parser.add_argument("--conn-manager", default="")  # our adapter's option; ignored here
    parser.add_argument("--all-to-all", action="store_true")
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--bootstrap", default="")
    parser.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (a namespace's own, with --netns)"
    )
    parser.add_argument("--round-timeout", type=float, default=30.0)
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between reads of the round key")
    args = parser.parse_args()
    if not args.all_to_all:
        raise SystemExit("hivemind_worker.py runs only the all-to-all round exchange (--all-to-all)")

    import hivemind
    from hivemind.utils import get_dht_time

    out = Path(args.out)
    sizes = [int(s) for s in args.sizes.split(",")]
    dht = hivemind.DHT(
        initial_peers=[args.bootstrap] if args.bootstrap else None,
        host_maddrs=[f"/ip4/{args.host}/tcp/0"],
        start=True,
    )
    if args.index == 0:
        # Written whole, then renamed: the orchestrator polls for the file and reads it at once.
        partial = out / "addr.partial"
        partial.write_text(str(dht.get_visible_maddrs()[0]))
        os.replace(partial, out / "addr")
    # Subkeys are peer ids, as in the reference; the `peer-i` files let a reader map them back
    # to process indexes (every peer writes its file before it is ready).
    me = str(dht.peer_id)
    (out / f"peer-{args.index}").write_text(me)
    (out / f"ready-{args.index}").write_text("1")
    start_file = out / "start"
    while not start_file.exists():
        time.sleep(0.05)
    start = float(start_file.read_text())
    peer_index = {path.read_text(): int(path.name.split("-")[1]) for path in out.glob("peer-*")}
    time.sleep(max(0.0, start - time.time()))

    received: dict[int, float] = {}
    published: dict[int, float] = {}
    errors: dict[str, int] = {}
    cpu_marks: list[float] = []

    def count(reason: str) -> None:
        errors[reason] = errors.get(reason, 0) + 1

    def save(finished: bool) -> None:
        # Written after every round, not only at the end: when hivemind's DHT process dies, the
        # rounds before still count, and `finished` false marks this peer as crashed.
        marks = [*cpu_marks, tree_cpu_seconds(os.getpid())]
        result = {
            "index": args.index,
            "peer_id": me,
            "finished": finished,
            "received": received,
            "heard": {},
            "errors": errors,
            "published": published,
            "cpu_s": marks[-1] - marks[0],
            "cpu_by_size": [b - a for a, b in itertools.pairwise(marks)],
            "idle_cpu_s": 0.0,
            "idle_s": 1.0,
            "drops": {},
        }
        path = out / f"result-{args.index}.json"
        path.with_suffix(".tmp").write_text(json.dumps(result))
        path.with_suffix(".tmp").replace(path)

    def answer(future: Any, deadline: float) -> Any:
        """The call's result, waiting in short slices: a call to hivemind's DHT process never
        returns once that process has died, so each slice also checks that it is alive."""
        while True:
            try:
                return future.result(timeout=min(0.5, max(0.01, deadline - time.time())))
            except TimeoutError:
                if not dht.is_alive():
                    raise RuntimeError("the DHT process died") from None
                if time.time() >= deadline:
                    raise

    exchanges = len(sizes) * args.messages
    for exchange in range(exchanges):
        if exchange % args.messages == 0:
            cpu_marks.append(tree_cpu_seconds(os.getpid()))
        size = sizes[exchange // args.messages]
        at = start + exchange * args.interval
        time.sleep(max(0.0, at - time.time()))
        key = f"bench_round_{exchange}"
        my_id = exchange * args.procs + args.index
        try:
            future = dht.store(key, os.urandom(size), get_dht_time() + 300, subkey=me, return_future=True)
            stored = answer(future, at + args.round_timeout)
        except Exception as error:  # a failure of the stack is what we measure: count it, go on
            count(f"store: {type(error).__name__}")
            stored = False
        if stored:
            published[my_id] = time.time()
        else:
            count("store returned False")
        deadline = at + args.round_timeout
        while time.time() < deadline and dht.is_alive():
            try:
                found = answer(dht.get(key, latest=True, return_future=True), deadline)
            except Exception as error:
                count(f"get: {type(error).__name__}")
                found = None
            if found is not None and isinstance(found.value, dict):
                now = time.time()
                for subkey, item in found.value.items():
                    index = peer_index.get(str(subkey))
                    if index is None or index == args.index or len(item.value) != size:
                        continue
                    received.setdefault(exchange * args.procs + index, now)
            if sum(1 for j in range(args.procs) if exchange * args.procs + j in received) >= args.procs - 1:
                break
            time.sleep(args.poll)
        save(finished=False)
        if not dht.is_alive():
            # os._exit: a normal exit waits forever on hivemind's threads for the dead process.
            print(f"hivemind's DHT process died in round {exchange} ({size} B batches)", file=sys.stderr)
            sys.stderr.flush()
            os._exit(1)
    # Keep serving the DHT until every peer is done (or the grace time passes): a peer that
    # left early would make the others' late reads look like losses of the stack.
    (out / f"done-{args.index}").write_text("1")
    until = time.time() + args.round_timeout
    while time.time() < until and not all((out / f"done-{i}").exists() for i in range(args.procs)):
        time.sleep(0.1)
    save(finished=True)
    dht.shutdown()


if __name__ == "__main__":
    main()
