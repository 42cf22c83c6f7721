"""`pytest.mark.in_order` (tests/conftest.py): the test command shuffles the tests inside each
module (pytest-randomly), except in a module marked `in_order`, whose tests are steps of one
scenario (tests/net/test_netns_nemesis.py: the nemesis first, the ledger of all it did last).
Checked on a small generated suite with the suite's own conftest, over several seeds: the marked
module runs in file order every time, the unmarked one does not (so the check can fail)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = [f"test_step_{name}" for name in ("one", "two", "three", "four", "five", "six")]


def module(marked: bool) -> str:
    mark = "pytestmark = pytest.mark.in_order\n" if marked else ""
    tests = "".join(f"\n\ndef {name}():\n    pass\n" for name in STEPS)
    return f"import pytest\n\n{mark}{tests}"


def run_order(folder: Path, seed: int) -> dict[str, list[str]]:
    """The order each generated module's tests ran in, under pytest-randomly's `seed`."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", f"--randomly-seed={seed}"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ran: dict[str, list[str]] = {"test_marked.py": [], "test_shuffled.py": []}
    for file, name in re.findall(r"^(test_\w+\.py)::(test_step_\w+) PASSED", done.stdout, re.MULTILINE):
        ran[file].append(name)
    return ran


def test_a_module_marked_in_order_runs_in_file_order_whatever_the_seed(tmp_path: Path) -> None:
    folder = tmp_path / "suite"
    folder.mkdir()
    shutil.copy(HERE.parent / "conftest.py", folder / "conftest.py")  # the suite's own
    (folder / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    alone: runs alone\n    in_order: file order\n    slow: slow\n"
    )
    (folder / "test_marked.py").write_text(module(marked=True))
    (folder / "test_shuffled.py").write_text(module(marked=False))
    shuffled_seen = False
    for seed in (1, 2, 3, 4):
        ran = run_order(folder, seed)
        assert ran["test_marked.py"] == STEPS, (seed, ran)
        assert sorted(ran["test_shuffled.py"]) == sorted(STEPS), (seed, ran)
        shuffled_seen |= ran["test_shuffled.py"] != STEPS
    # The unmarked module was shuffled under at least one seed: random order is really on.
    assert shuffled_seen


def alone_module() -> str:
    """Two `alone` tests written apart, between and after ordinary ones."""
    names = [("ordinary_a", ""), ("lone_b", "@pytest.mark.alone\n"), ("ordinary_c", ""), ("ordinary_d", "")]
    names += [("lone_e", "@pytest.mark.alone\n"), ("ordinary_f", "")]
    tests = "".join(f"\n\n{mark}def test_step_{name}():\n    pass\n" for name, mark in names)
    return "import pytest\n" + tests


def test_a_modules_alone_tests_run_first_and_back_to_back_in_shuffled_order(tmp_path: Path) -> None:
    """Between two `alone` tests of one module another of its tests would let the other workers
    start theirs, and the second `alone` test would wait for all of them again: conftest puts a
    module's `alone` tests at its front. The rest stays shuffled, and so do the `alone` ones
    among themselves."""
    folder = tmp_path / "suite"
    folder.mkdir()
    shutil.copy(HERE.parent / "conftest.py", folder / "conftest.py")
    (folder / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    alone: runs alone\n    in_order: file order\n    slow: slow\n"
    )
    (folder / "test_shuffled.py").write_text(alone_module())
    orders = []
    for seed in (1, 2, 3, 4, 5, 6):
        ran = run_order(folder, seed)["test_shuffled.py"]
        assert len(ran) == 6, (seed, ran)
        assert sorted(ran[:2]) == ["test_step_lone_b", "test_step_lone_e"], (seed, ran)
        orders.append(tuple(ran))
    assert len({order[:2] for order in orders}) == 2 and len({order[2:] for order in orders}) > 1, orders
