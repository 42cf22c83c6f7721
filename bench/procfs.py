"""Resident memory of a process, read from /proc (Linux), for the benches that watch it."""

from __future__ import annotations

from pathlib import Path


def rss_mib(pid: int | str = "self") -> float:
    """Current resident memory (VmRSS) of `pid` in MiB; 0 where it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
