"""What a test run leaves behind: nothing in the temp folder. Each run made a models cache per
process (tests/conftest.py points XDG_CACHE_HOME there) and lock files per worker, and left them
all: ~500 cache folders after a day of runs on one machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def test_a_run_on_two_workers_leaves_no_cache_folder_or_lock_file(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    suite, temp = tmp_path / "suite", tmp_path / "temp"
    suite.mkdir()
    temp.mkdir()
    shutil.copy(HERE.parent / "conftest.py", suite / "conftest.py")
    (suite / "test_cache.py").write_text(
        "import os\n\n\n"
        "def test_cache_is_a_folder_of_its_own():\n"
        "    assert os.path.basename(os.environ['XDG_CACHE_HOME']).startswith('swarmp2p-test-cache-')\n"
    )
    environment = {**os.environ, "TMPDIR": str(temp)}
    environment.pop("SWARMP2P_TEST_KEEP_CACHE", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n2", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=suite,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
    left = sorted(str(path.relative_to(temp)) for path in temp.rglob("*") if not path.is_dir())
    left += sorted(path.name for path in temp.glob("swarmp2p-test-cache-*"))
    assert left == [], left
