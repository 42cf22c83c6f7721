"""A restart loop for a node: `swarmp2p supervise -- node ARGS` or `swarmp2p node --restart-on-failure`.

The supervisor runs the node as a child process with the same arguments every time, so a
restarted node keeps its data dir, hence its identity (peer id), checkpoints and swarm. When the
child fails (non-zero exit, or killed by a signal other than the supervisor's own stop), it logs
why and starts it again after a backoff that doubles from `initial_backoff_s` up to
`max_backoff_s`; a run that lasted `fast_s` seconds or more resets the backoff and the count of
fast failures. After `max_fast_failures` fast failures in a row it gives up with ONE line (a
node that cannot start will not start by being restarted) and exits with the child's status.

A clean exit (status 0: the node was stopped) ends the supervisor. SIGINT / SIGTERM sent to the
supervisor are passed to the child, which stops and saves as usual; the supervisor then exits
with the child's status (systemd's `systemctl stop` works this way).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs


@attrs.frozen
class RestartPolicy:
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    fast_s: float = 60.0
    """A run shorter than this counts as a fast failure (it failed at or soon after start-up)."""
    max_fast_failures: int = 5


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def node_command(args: Sequence[str]) -> list[str]:
    """The child's argv for `swarmp2p <args>` run by this Python (no PATH lookup)."""
    return [sys.executable, "-m", "swarmp2p.cli", *args]


def supervise(
    argv: Sequence[str],
    policy: RestartPolicy = RestartPolicy(),
    *,
    say: Callable[[str], None] | None = None,
    spawn: Callable[[Sequence[str]], Any] = subprocess.Popen,
    clock: Callable[[], float] = time.monotonic,
    handle_signals: bool = True,
) -> int:
    """Run `argv` until it exits cleanly, the supervisor is stopped, or it keeps failing fast.
    Returns the exit status to leave with."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    stop = threading.Event()
    child: list[Any] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()
        if child and child[0].poll() is None:
            child[0].send_signal(signum)

    if handle_signals:
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        fast_failures = 0
        backoff = policy.initial_backoff_s
        starts = 0
        while True:
            starts += 1
            started = clock()
            process = spawn(list(argv))
            child[:] = [process]
            returncode = process.wait()
            ran = clock() - started
            if stop.is_set():
                return 0 if returncode in (0, -signal.SIGINT, -signal.SIGTERM) else returncode
            if returncode == 0:
                say("supervisor: the node exited cleanly; not restarting")
                return 0
            if ran < policy.fast_s:
                fast_failures += 1
            else:
                fast_failures, backoff = 1, policy.initial_backoff_s
            why = describe_exit(returncode)
            if fast_failures >= policy.max_fast_failures:
                say(
                    f"supervisor: giving up: the node failed {fast_failures} times in a row, each "
                    f"within {policy.fast_s:g} s of starting (last: it {why}); fix the error above "
                    "and start it again"
                )
                return returncode if returncode > 0 else 1
            say(
                f"supervisor: the node {why} after {ran:.1f} s; restarting it in {backoff:g} s "
                f"(same data dir and identity; fast failure {fast_failures} of {policy.max_fast_failures})"
            )
            if stop.wait(backoff):
                return 0
            backoff = min(backoff * 2, policy.max_backoff_s)
    finally:
        if handle_signals:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
