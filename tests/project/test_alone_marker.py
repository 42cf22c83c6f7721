"""`@pytest.mark.alone` (tests/conftest.py): under pytest-xdist such a test runs with no other test
beside it. Checked on a small generated suite run on two workers, once with the mark (no other
test overlaps it) and once without (they do overlap: the check can fail)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SUITE_TEMPLATE = """
import os
import time
from pathlib import Path

import pytest

LOG = Path(__file__).parent / "intervals.txt"


def spend(name):
    started = time.time()
    time.sleep(SECONDS)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    with LOG.open("a") as log:
        log.write(f"{name} {started} {time.time()} {worker}\\n")


MARK
def test_the_one():
    spend("LONE")


@pytest.mark.parametrize("index", range(COUNT))
def test_ordinary(index):
    spend(f"PREFIXordinary{index}")
"""


def generated_suite(
    mark: str, lone: str = "alone", ordinary: int = 6, prefix: str = "", seconds: float = 0.2
) -> str:
    """A module of one test (`mark`ed, logged as `lone`) and `ordinary` unmarked ones (logged as
    `prefix`ordinaryN), each spending `seconds` and logging `name start end worker`."""
    text = SUITE_TEMPLATE
    for key, value in {
        "MARK": mark,
        "LONE": lone,
        "COUNT": ordinary,
        "PREFIX": prefix,
        "SECONDS": seconds,
    }.items():
        text = text.replace(key, str(value))
    return text


SUITE = generated_suite("MARK")


QUIET = ("-p", "no:cacheprovider", "-p", "no:randomly")


def run_generated_suite(
    folder: Path, files: dict[str, str], *args: str, workers: int = 2
) -> dict[str, tuple[float, float]]:
    """Run the generated test `files` in `folder` on `workers` workers, with a copy of our
    conftest; every test or fixture logs `name start end` to intervals.txt. Returns those
    intervals."""
    folder.mkdir()
    shutil.copy(HERE.parent / "conftest.py", folder / "conftest.py")  # the suite's own
    (folder / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    alone: runs alone\n    slow: a real-time swarm\n"
    )
    for name, text in files.items():
        (folder / name).write_text(text)
    done = subprocess.run(
        # In written order (no shuffle): the unmarked check needs the one test to start while the
        # ordinary ones still run, which a shuffle that puts it last would not give.
        [sys.executable, "-m", "pytest", f"-n{workers}", "-q", *QUIET, *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {
        name: (float(start), float(end))
        for name, start, end, *_ in (
            line.split() for line in (folder / "intervals.txt").read_text().splitlines()
        )
    }


def overlaps_in_generated_suite(folder: Path, files: dict[str, str], lone: str, *args: str) -> list[str]:
    """The names whose interval overlaps the one of `lone` in a generated suite's run."""
    intervals = run_generated_suite(folder, files, *args)
    assert len(intervals) == 7, intervals
    start, end = intervals.pop(lone)
    return [name for name, (s, e) in intervals.items() if s < end and start < e]


def overlaps(tmp_path: Path, mark: str) -> list[str]:
    folder = tmp_path / mark.strip("@.") if mark else tmp_path / "unmarked"
    return overlaps_in_generated_suite(folder, {"test_generated.py": SUITE.replace("MARK", mark)}, "alone")


def test_an_alone_test_has_no_other_test_beside_it(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    assert overlaps(tmp_path, "@pytest.mark.alone") == []
    assert overlaps(tmp_path, "") != []  # unmarked, the other worker runs beside it


def most_beside_at_once(intervals: dict[str, tuple[float, float]], lone: str) -> int:
    """The most other tests that ran at one instant while `lone` ran."""
    start, end = intervals[lone]
    return most_at_once(
        [
            (max(s, start), min(e, end))
            for name, (s, e) in intervals.items()
            if name != lone and s < end and start < e
        ]
    )


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most of `intervals` that overlap at one instant."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = running = 0
    for _, step in edges:  # at a tie an end (-1) sorts first: touching is not overlapping
        running += step
        most = max(most, running)
    return most


def test_on_three_workers_an_alone_test_has_one_test_at_most_beside_it(tmp_path: Path) -> None:
    """Three workers (the test command's choice when the CPU is idle): one of the others goes on
    beside an `alone` test, so the CPU it leaves idle is used, and the third waits."""
    pytest.importorskip("xdist")
    suite = generated_suite("MARK", ordinary=12).replace(
        'def test_the_one():\n    spend("alone")',
        'def test_the_one():\n    spend("alone")\n    spend("alone-more")\n    spend("alone-end")',
    )
    runs = {}
    for mark in ("@pytest.mark.alone", ""):
        folder = tmp_path / (mark.strip("@.") or "unmarked")
        intervals = run_generated_suite(folder, {"test_generated.py": suite.replace("MARK", mark)}, workers=3)
        assert len(intervals) == 15, intervals
        # the alone test's whole span: its three logged steps
        first, last = intervals.pop("alone"), intervals.pop("alone-end")
        intervals.pop("alone-more")
        intervals["alone"] = (first[0], last[1])
        runs[mark] = most_beside_at_once(intervals, "alone")
    assert runs["@pytest.mark.alone"] == 1, runs
    assert runs[""] == 2, runs  # unmarked, both other workers run beside it


def workers_of(folder: Path) -> dict[str, str]:
    """Which worker ran each logged test of a generated suite run in `folder`."""
    return {line.split()[0]: line.split()[3] for line in (folder / "intervals.txt").read_text().splitlines()}


def worker_suite(name: str, alone: bool, ordinary: int) -> str:
    mark = "@pytest.mark.alone" if alone else ""
    return generated_suite(mark, lone=name, ordinary=ordinary, prefix=f"{name}-", seconds=0.3)


def test_alone_modules_share_one_worker_and_run_back_to_back(tmp_path: Path) -> None:
    """Under `--dist loadscope` (the test command's) the modules with `alone` tests are one unit
    of work: on three workers, their `alone` tests run on one worker, one after the other, the
    module with other tests too last; spread over workers, each waited for the others' in turn."""
    pytest.importorskip("xdist")
    files = {
        "test_a_alone.py": worker_suite("a", alone=True, ordinary=2),
        "test_b_alone.py": worker_suite("b", alone=True, ordinary=0),
        "test_c_ordinary.py": worker_suite("c", alone=False, ordinary=6),
        "test_d_ordinary.py": worker_suite("d", alone=False, ordinary=6),
    }
    intervals = run_generated_suite(tmp_path / "suite", files, "--dist", "loadscope", workers=3)
    worker_of = workers_of(tmp_path / "suite")
    ran = {name: (worker_of[name], start) for name, (start, _) in intervals.items()}
    assert len(ran) == 18, sorted(ran)
    worker = ran["b"][0]
    assert ran["a"][0] == worker, ran
    on_it = sorted((start, name) for name, (w, start) in ran.items() if w == worker)
    assert [name for _, name in on_it][:2] == ["b", "a"], on_it


MODULE_SUITE = """
import time
from pathlib import Path

import pytest

LOG = Path(__file__).parent / "intervals.txt"


@pytest.fixture(scope="module")
def swarm(LOCK):
    started = time.time()
    time.sleep(0.2)  # the swarm starting: no test of this module runs yet
    yield
    with LOG.open("a") as log:
        log.write(f"swarm {started} {time.time()}\\n")


@pytest.mark.parametrize("index", range(2))
def test_uses_the_swarm(swarm, index):
    time.sleep(0.1)
"""

ORDINARY_SUITE = """
import time
from pathlib import Path

import pytest

LOG = Path(__file__).parent / "intervals.txt"


@pytest.mark.parametrize("index", range(6))
def test_ordinary(index):
    started = time.time()
    time.sleep(0.2)
    with LOG.open("a") as log:
        log.write(f"ordinary{index} {started} {time.time()}\\n")
"""


def module_overlaps(tmp_path: Path, lock: bool) -> list[str]:
    """Ordinary tests that ran while a module-scoped fixture of another module was alive."""
    files = {
        # The fixture's dependency: conftest's alone_module, or one that takes no lock.
        "test_a_swarm.py": MODULE_SUITE.replace("LOCK", "alone_module" if lock else "tmp_path_factory"),
        "test_b_ordinary.py": ORDINARY_SUITE,
    }
    folder = tmp_path / ("locked" if lock else "unlocked")
    # --dist loadfile: the swarm module's tests on one worker, the ordinary ones on the other
    return overlaps_in_generated_suite(folder, files, "swarm", "--dist", "loadfile")


def test_a_module_fixture_requesting_alone_module_has_no_other_test_beside_it(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    assert module_overlaps(tmp_path, lock=True) == []
    assert module_overlaps(tmp_path, lock=False) != []  # without it the other worker runs beside it


LONG_SUITE = """
import time
from pathlib import Path

LOG = Path(__file__).parent / "intervals.txt"


def test_long():
    started = time.time()
    time.sleep(1)
    with LOG.open("a") as log:
        log.write(f"long {started} {time.time()}\\n")
"""

ALONE_SUITE = SUITE.replace("MARK", "@pytest.mark.alone").split("@pytest.mark.parametrize")[0]


def test_alone_modules_run_first_and_wait_behind_no_long_test(tmp_path: Path) -> None:
    """An `alone` test waits for the test running on the other worker. Behind a long one (the
    60-round chain swarm, 250 s) one worker idled for minutes in every CI run: conftest's
    collection order starts the modules with `alone` tests first (and turns off xdist's own
    reordering by test count, which would put them back). With `--dist loadscope`, as
    scripts/test.sh runs the suite, the alone module here would otherwise run after the long
    one, on its worker."""
    pytest.importorskip("xdist")
    files = {
        "test_a_long.py": LONG_SUITE,
        "test_b_ordinary.py": ORDINARY_SUITE,
        "test_z_alone.py": ALONE_SUITE,
    }
    intervals = run_generated_suite(tmp_path / "ordered", files, "--dist", "loadscope")
    assert len(intervals) == 8, intervals
    assert intervals["alone"][1] <= intervals["long"][0], intervals


def test_a_pytest_started_inside_a_worker_takes_no_lock_of_the_outer_run(tmp_path: Path) -> None:
    """A test that runs pytest in a subprocess (tests/project/test_hypothesis_profiles.py does) passes it
    the xdist worker's environment. That inner pytest is no worker of the outer run and must not
    queue on its lock: while an `alone` test of the outer run waits at the gate for the outer
    test to end, the inner one would wait for the `alone` test, a deadlock until the timeout (a
    fresh-clone CI run lost test_hypothesis_profiles that way, 120 s). Here the gate is held as
    such a waiting `alone` test holds it."""
    run_id = f"inner-{os.getpid()}-{tmp_path.name}"
    folder = Path(tempfile.gettempdir()) / f"swarmp2p-pytest-alone-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    gate_path = folder / f"{run_id}.gw0.gate"
    (tmp_path / "conftest.py").write_text((HERE.parent / "conftest.py").read_text())
    (tmp_path / "test_inner.py").write_text("def test_inner():\n    print('INNER RAN')\n")
    environment = {**os.environ, "PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_TESTRUNUID": run_id}
    try:
        with gate_path.open("a") as gate:
            fcntl.flock(gate, fcntl.LOCK_EX)  # an `alone` test of the "outer run" waits behind it
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_inner.py"],
                cwd=tmp_path,
                env=environment,
                capture_output=True,
                text=True,
                timeout=60,
            )
    finally:
        for suffix in (".gw0.gate", ".gw0.slot"):
            (folder / f"{run_id}{suffix}").unlink(missing_ok=True)
    assert done.returncode == 0 and "INNER RAN" in done.stdout, done.stdout + done.stderr


def test_one_worker_stays_on_in_process_tests_while_the_others_run_real_time_swarms(tmp_path: Path) -> None:
    """On three workers, `slow` modules (real-time swarms, mostly waiting on round timers) take
    two workers at most while other modules are queued: the third keeps the CPU busy. All three
    on swarms left 2 idle cores 40-60% idle for the suite's first minutes. Under `--dist loadfile`
    (no scheduler of ours) the same suite runs three swarms at once: the check can fail."""
    pytest.importorskip("xdist")
    # Each module logs its tests as its own name's prefix: s0- to s3- are `slow`, r0- to r3- not.
    files = {
        f"test_s{index}_swarm.py": generated_suite(
            "@pytest.mark.slow", lone=f"s{index}-one", ordinary=1, prefix=f"s{index}-", seconds=1.0
        )
        for index in range(4)
    }
    files |= {
        f"test_r{index}_local.py": generated_suite(
            "", lone=f"r{index}-one", ordinary=2, prefix=f"r{index}-", seconds=0.4
        )
        for index in range(4)
    }
    most = {}
    for dist in ("loadscope", "loadfile"):
        intervals = run_generated_suite(tmp_path / dist, files, "--dist", dist, workers=3)
        assert len(intervals) == 20, sorted(intervals)
        most[dist] = most_at_once([span for name, span in intervals.items() if name.startswith("s")])
    assert most == {"loadscope": 2, "loadfile": 3}, most
