"""A devnet for tests: `swarmp2p chain devnet` started as a user starts it, and a fast node config."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

STAGE_SECONDS = 6


class Devnet:
    def __init__(
        self, directory: Path, nodes: int, backend: str, stage_seconds: float = STAGE_SECONDS
    ) -> None:
        args = [
            sys.executable, "-m", "swarmp2p.cli", "chain", "devnet", "--nodes", str(nodes),
            "--dir", str(directory), "--stage-seconds", f"{stage_seconds:g}", "--port", "0",
            "--backend", backend,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def until(self, prefix: str, timeout_s: float = 60) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"devnet printed no {prefix!r} line:\n" + "\n".join(self.seen)) from None
            self.seen.append(line)
            if line.startswith(prefix):
                return self.seen

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode
