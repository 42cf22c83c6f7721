"""Resident memory and CPU time of a process, read from /proc (Linux), for the benches that watch it."""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int | str = "self") -> float:
    """Current resident memory (VmRSS) of `pid` in MiB; 0 where it cannot be read."""
    return _status_mib(pid, "VmRSS:")


def peak_rss_mib(pid: int | str = "self") -> float:
    """Peak resident memory (VmHWM) of `pid` in MiB, its own since it started: unlike
    getrusage's ru_maxrss, which Linux carries over fork and exec from the parent."""
    return _status_mib(pid, "VmHWM:")


def _status_mib(pid: int | str, field: str) -> float:
    """A kB field of /proc/PID/status in MiB; 0 where it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
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


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (children, their children, ...), from /proc's parent links."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry.name))  # ppid is field 4 of proc(5)
    found: list[int] = []
    todo = [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found.extend(children)
        todo.extend(children)
    return found


def tree_rss_mib(pid: int) -> float:
    """Resident memory of `pid` and every process below it, in MiB (a run spread over workers)."""
    return rss_mib(pid) + sum(rss_mib(child) for child in descendants(pid))
