"""Resident memory and CPU time of a process, read from /proc (Linux), for the benches that watch it."""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int | str = "self") -> float:
    """Current resident memory (VmRSS) of `pid` in MiB; 0 where it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int | str = "self") -> float | None:
    """User + system CPU seconds `pid` has used so far; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the command name: state is field 3, utime 14 and stime 15 (1-based) of proc(5).
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
