"""swarmp2p.memory: after a burst of ~1 MB buffers, a node's memory goes back down.

Each case runs in a fresh interpreter (the allocator's state is per process): it frees one 2 MB
buffer (which raises glibc's dynamic mmap threshold, as any freed large buffer does in a running
node), then holds a hundred 1 MB buffers with a small long-lived object allocated after each, and
frees the buffers. RSS is read from /proc before, at the peak and after.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = """
import json, os, sys
from swarmp2p import memory

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

applied = memory.configure() if sys.argv[1] == "configured" else False
start = rss_mib()
warm = os.urandom(2_000_000)
del warm
pinned, buffers = [], []
for _ in range(100):
    buffers.append(os.urandom(1_000_000))
    pinned.append(bytearray(600))
peak = rss_mib()
del buffers
print(json.dumps({"applied": applied, "start": start, "peak": peak, "after": rss_mib()}))
"""


def _run(mode: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and uses glibc's mallopt")
def test_freed_large_buffers_leave_the_process_once_configured() -> None:
    plain, configured = _run("plain"), _run("configured")
    assert configured["applied"]
    assert plain["peak"] - plain["start"] > 90 and configured["peak"] - configured["start"] > 90
    # Without it the allocator keeps the heap the small objects pin: the case really exercises that.
    assert plain["after"] - plain["start"] > 80, plain
    assert configured["after"] - configured["start"] < 10, configured


HEAP_PROGRAM = """
import json, sys, time
from swarmp2p import memory

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

memory.configure()
start = rss_mib()
pinned, frames = [], []
for _ in range(1500):  # noise-frame-sized buffers: below the mmap threshold, so on the heap
    frames.append(bytearray(64 * 1024))
    pinned.append(bytearray(600))
peak = rss_mib()
del frames
held = rss_mib()
began = time.perf_counter()
gave = memory.give_back() if sys.argv[1] == "give-back" else False
took_ms = (time.perf_counter() - began) * 1000
result = {"start": start, "peak": peak, "held": held, "after": rss_mib(), "gave": gave, "ms": took_ms}
print(json.dumps(result))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and uses glibc's malloc_trim")
def test_free_heap_pages_between_live_objects_go_back_when_given_back() -> None:
    def run(mode: str) -> dict[str, float]:
        done = subprocess.run(
            [sys.executable, "-c", HEAP_PROGRAM, mode], capture_output=True, text=True, timeout=60, check=True
        )
        return json.loads(done.stdout)

    kept, given = run("keep"), run("give-back")
    for case in (kept, given):
        assert case["peak"] - case["start"] > 80, case  # ~94 MB of frames really were on the heap
        # The small objects between the frames pin the heap: freeing the frames alone keeps it.
        assert case["held"] - case["start"] > 80, case
    assert kept["after"] - kept["start"] > 80, kept
    assert given["gave"] and given["after"] - given["start"] < 10, given


def test_swarmp2p_node_configures_the_allocator_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from swarmp2p import memory
    from swarmp2p.cli import app

    calls: list[str] = []
    monkeypatch.setattr(memory, "configure", lambda: calls.append("configure") or True)
    # A device this machine does not have: the node stops at its first check, after the CLI set up.
    result = CliRunner().invoke(app, ["node", "--data-dir", str(tmp_path / "data"), "--device", "cuda:99"])
    assert result.exit_code != 0 and "cuda:99" in result.output, result.output
    assert calls == ["configure"]


def test_give_back_runs_every_interval_while_its_nursery_lives(monkeypatch: pytest.MonkeyPatch) -> None:
    import trio
    import trio.testing

    from swarmp2p import memory

    times: list[float] = []
    monkeypatch.setattr(memory, "give_back", lambda: times.append(trio.current_time()) or True)

    async def main() -> None:
        with trio.move_on_after(16):
            await memory.give_back_periodically(5.0)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    if memory._glibc_function("malloc_trim") is None:  # not glibc: the loop returns at once
        assert times == []
    else:
        assert times == [5.0, 10.0, 15.0]
