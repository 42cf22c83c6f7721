"""`swarmp2p chain devnet` started as a user starts it, for the tests and the benches: the CLI as
a child process whose output is read on a thread, so a caller can wait for a line (the printed
node commands end with `state: ...`) without blocking on the pipe, and stop it as Ctrl-C does."""

from __future__ import annotations

import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parents[1]

# Makes the tiny model's round fit a few-second stage on one thread, for several real nodes on two
# cores (the chain and devnet tests, the chain soak bench), with a held-out evaluation of two
# questions; the swarm's rules are untouched.
FAST_NODE_CONFIG = """
[node]
questions_per_round = 2
n_local = 2
n_external = 2
hello_interval_s = 2.0

[trainer]
tasks = ["basic_arithmetic"]
threads = 1
format_reward = 0.5
max_new_tokens = 16
tiny_hidden_size = 32
tiny_pretrain_steps = 0
eval_questions = 2
"""


class DevnetSilent(TimeoutError):
    """The devnet printed no line with the awaited prefix in time; the message holds what it
    printed, which says why (a busy port, a missing anvil, a contract error)."""


class Devnet:
    """`swarmp2p chain devnet --nodes N --dir DIRECTORY --port 0 --backend BACKEND` running.

    `seen`: every line read so far by `until`/`node_commands`, in order; `lines`: those not read
    yet. `log`: a file that gets every line as it comes (the benches keep it)."""

    def __init__(
        self,
        directory: Path,
        nodes: int,
        backend: str = "anvil",
        stage_seconds: float = 6.0,
        *,
        log: Path | None = None,
        cwd: Path = REPO,
    ) -> None:
        args = [
            sys.executable, "-m", "swarmp2p.cli", "chain", "devnet", "--nodes", str(nodes),
            "--dir", str(directory), "--stage-seconds", f"{stage_seconds:g}", "--port", "0",
            "--backend", backend,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._log: TextIO | None = log.open("w") if log is not None else None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if self._log is not None:
                self._log.write(line)
                self._log.flush()
            self.lines.put(line.rstrip("\n"))
        if self._log is not None:
            self._log.close()

    def until(self, prefix: str, timeout_s: float = 60) -> list[str]:
        """Every line seen up to and including the first one read now that starts with
        `prefix`; raises DevnetSilent after `timeout_s` without one."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise DevnetSilent(f"devnet printed no {prefix!r} line:\n" + "\n".join(self.seen)) from None
            self.seen.append(line)
            if line.startswith(prefix):
                return self.seen

    def node_commands(self, timeout_s: float = 120) -> list[list[str]]:
        """The printed `swarmp2p node ...` commands as argument lists, once the devnet says it
        is ready (its `state:` line)."""
        printed = self.until("state: ", timeout_s)
        return [shlex.split(line.strip()) for line in printed if line.strip().startswith("swarmp2p node")]

    def stop(self) -> int:
        """Stop it as Ctrl-C does (SIGINT; killed after 20 s) and return its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode
