"""`@pytest.mark.alone` (tests/conftest.py): under pytest-xdist such a test runs with no other test
beside it. Checked on a small generated suite run on two workers, once with the mark (no other
test overlaps it) and once without (they do overlap: the check can fail)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SUITE = """
import time
from pathlib import Path

import pytest

LOG = Path(__file__).parent / "intervals.txt"


def spend(name):
    started = time.time()
    time.sleep(0.6)
    with LOG.open("a") as log:
        log.write(f"{name} {started} {time.time()}\\n")


MARK
def test_the_one():
    spend("alone")


@pytest.mark.parametrize("index", range(6))
def test_ordinary(index):
    spend(f"ordinary{index}")
"""


def overlaps(tmp_path: Path, mark: str) -> list[str]:
    folder = tmp_path / mark.strip("@.") if mark else tmp_path / "unmarked"
    folder.mkdir()
    shutil.copy(HERE / "conftest.py", folder / "conftest.py")
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: runs alone\n")
    (folder / "test_generated.py").write_text(SUITE.replace("MARK", mark))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    intervals = {
        name: (float(start), float(end))
        for name, start, end in (line.split() for line in (folder / "intervals.txt").read_text().splitlines())
    }
    assert len(intervals) == 7, intervals
    start, end = intervals.pop("alone")
    return [name for name, (s, e) in intervals.items() if s < end and start < e]


def test_an_alone_test_has_no_other_test_beside_it(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    assert overlaps(tmp_path, "@pytest.mark.alone") == []
    assert overlaps(tmp_path, "") != []  # unmarked, the other worker runs beside it
