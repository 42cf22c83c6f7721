"""Hypothesis profiles for the whole suite.

- `ci` (the default): what a plain `pytest` and CI run, sized so the suite stays fast on 2 cores.
- `deep`: thousands of examples per property, for a long run before a release or after a change
  to the protocol (`pytest --hypothesis-profile=deep tests/test_protocol_*.py`).

Choose with hypothesis' own `--hypothesis-profile=NAME` option or the `HYPOTHESIS_PROFILE`
environment variable (the option wins). Tests do not hard-code example counts: a property whose
examples are expensive (a whole simulated swarm, a real chain) asks for a share of the
profile's count with `budget.examples(share)`, so `deep` runs it deeper too.

No deadline anywhere: these machines are shared and a slow example is not a failure.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "print_blob": True}

settings.register_profile("ci", max_examples=200, **_COMMON)
settings.register_profile("deep", max_examples=5000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_session_cache: str | None = None  # the models cache this process made (removed at its end)
_run_id: str | None = None  # the xdist run this process controls (its lock files removed at its end)


def pytest_configure(config: pytest.Config) -> None:
    """Commands under test (`swarmp2p node`, `train`, their subprocesses) cache built models per user
    (`trainer.config.user_model_cache`); point that cache at one folder per test session so tests
    never write to the user's own cache, and still build each model once per session."""
    # Popped: a SWARMP2P_* variable that names no setting is a config error in every command the
    # tests start (it reached their environment and they all failed).
    global _session_cache
    if os.environ.pop("SWARMP2P_TEST_KEEP_CACHE", None) is None:
        import tempfile

        _session_cache = tempfile.mkdtemp(prefix="swarmp2p-test-cache-")
        os.environ["XDG_CACHE_HOME"] = _session_cache
    # pytest-xdist's `--dist loadscope` hands modules out by how many tests each has, most first
    # (its `--loadscope-reorder`, on by default). The order below is the one that counts, so the
    # controller must keep the collection's order; there is no other way to say so from here.
    option = getattr(config, "option", None)
    if option is not None and hasattr(option, "loadscopereorder"):
        option.loadscopereorder = False
    # The controller names the run (xdist would, at random, where this process cannot read it),
    # so that it can remove the run's lock files at its end (below).
    global _run_id
    controller = not hasattr(config, "workerinput")
    if option is not None and controller and getattr(option, "testrunuid", ()) is None:
        import uuid

        option.testrunuid = _run_id = uuid.uuid4().hex


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's models cache and lock files go with it (a cache folder was left in the temp
    folder per process and run: ~500 after a day of runs here)."""
    if _session_cache is not None:
        import shutil

        shutil.rmtree(_session_cache, ignore_errors=True)
    if _run_id is not None:  # the workers are gone: nothing holds the run's locks
        for path in Path(_lock_folder()).glob(f"{_run_id}.*"):
            path.unlink(missing_ok=True)


# ---- tests that must run (nearly) alone under pytest-xdist ---------------------------------------
# `scripts/test.sh` runs the suite on two or four workers. A few tests run two honest peers and an
# attacker at full speed in real time, and judge the peers by their round deadlines: beside
# another worker's test on a busy machine, the starved process misses a collect window (the
# gossip flood test failed a two-worker run that way). Marked `@pytest.mark.alone`, such a test
# waits for the other workers' current tests to end, and they start nothing new until it is
# done; on three or more workers (chosen only when the CPU is idle as the suite starts) one of the
# others goes on, so at most one test runs beside it. Each of those tests passed a whole run
# beside two busy CPU loops on 2 cores, more than one neighbouring test takes; fully alone, the
# four of them left ~70% of an idle CPU unused for the ~90 s they take.
#
# Locks over files, one pair per worker: a test holds its worker's slot shared, taken through
# the worker's gate. An `alone` test takes the one `alone` file (one such test at a time), shuts
# the other workers' gates so that they start nothing new, takes the slots of all of them but
# the one to spare as each one's current test ends, and opens the spared worker's gate again.

_ALONE_LOCK_DIR = "swarmp2p-pytest-alone"


def _xdist_run_id(config: pytest.Config) -> str | None:
    """The pytest-xdist run's id (the same in all its workers); None outside xdist. Asked of the
    session (`workerinput`), not only of the environment: a pytest that a test starts in a
    subprocess inherits the worker's PYTEST_XDIST_* variables, and queueing on the outer run's
    lock would deadlock it against an `alone` test waiting for the test that started it."""
    if not hasattr(config, "workerinput") or not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return os.environ.get("PYTEST_XDIST_TESTRUNUID")


def _lock_folder() -> str:
    import tempfile

    # One folder per user: another user's (a root run's) would not be writable.
    folder = os.path.join(tempfile.gettempdir(), f"{_ALONE_LOCK_DIR}-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    return folder


def _lock_path(run_id: str, name: str) -> str:
    return os.path.join(_lock_folder(), f"{run_id}.{name}")


def _workers(config: pytest.Config) -> list[str]:
    count = int(config.workerinput.get("workercount", 1))  # type: ignore[attr-defined]
    return [f"gw{index}" for index in range(count)]


def neighbours_allowed(workers: int) -> int:
    """How many other workers' tests may run beside an `alone` test: none on two workers (the
    test command's choice on a busy CPU), one on three or more."""
    return 1 if workers >= 3 else 0


_held_exclusively = False  # this worker holds the others' slots (for an `alone_module`)


@contextmanager
def _alone_lock(alone: bool, config: pytest.Config) -> Iterator[None]:
    """Hold this worker's slot shared (`alone` False), or the others' slots (all but the spared
    ones); nothing outside xdist, and nothing more while this worker already holds the others'
    (`alone_module`)."""
    global _held_exclusively
    run_id = _xdist_run_id(config)
    if run_id is None or _held_exclusively:
        yield
        return
    import fcntl

    me = os.environ["PYTEST_XDIST_WORKER"]
    if not alone:
        with (
            open(_lock_path(run_id, f"{me}.gate"), "a") as gate,
            open(_lock_path(run_id, f"{me}.slot"), "a") as slot,
        ):
            fcntl.flock(gate, fcntl.LOCK_EX)  # shut while an `alone` test drains this worker
            fcntl.flock(slot, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
            try:
                yield
            finally:
                fcntl.flock(slot, fcntl.LOCK_UN)
        return
    others = [worker for worker in _workers(config) if worker != me]
    with _others_drained(run_id, others, len(others) - neighbours_allowed(len(others) + 1)):
        _held_exclusively = True
        try:
            yield
        finally:
            _held_exclusively = False


@contextmanager
def _others_drained(run_id: str, others: list[str], needed: int) -> Iterator[None]:
    """Take the `alone` file, then the slots of `needed` of the `others` (the first whose tests
    end), keeping each of their gates shut; the rest's gates open again once enough are held."""
    import fcntl
    import time

    with ExitStack() as stack:
        alone_file = stack.enter_context(open(_lock_path(run_id, "alone"), "a"))
        fcntl.flock(alone_file, fcntl.LOCK_EX)
        stack.callback(fcntl.flock, alone_file, fcntl.LOCK_UN)
        gates = {
            worker: stack.enter_context(open(_lock_path(run_id, f"{worker}.gate"), "a")) for worker in others
        }
        slots = {
            worker: stack.enter_context(open(_lock_path(run_id, f"{worker}.slot"), "a")) for worker in others
        }
        for worker in others:
            fcntl.flock(gates[worker], fcntl.LOCK_EX)  # a worker holds its gate only for an instant
            stack.callback(fcntl.flock, gates[worker], fcntl.LOCK_UN)
        waiting = list(others)
        while len(others) - len(waiting) < needed:
            for worker in list(waiting):
                try:
                    fcntl.flock(slots[worker], fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                stack.callback(fcntl.flock, slots[worker], fcntl.LOCK_UN)
                waiting.remove(worker)
                if len(others) - len(waiting) == needed:
                    break
            else:
                time.sleep(0.05)
        for worker in waiting:  # spared: its gate opens, it goes on with its tests
            fcntl.flock(gates[worker], fcntl.LOCK_UN)
        yield


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run order, by module: modules with `alone` tests first (those with fewer other tests
    first), then modules marked `slow`, then the rest; within each, modules with more tests first
    (xdist's own heuristic), then as collected. A module's tests keep the order they came in (a
    new random one each run under pytest-randomly, which shuffles before this hook), its `alone`
    tests moved to its front.

    Why: an `alone` test waits for the test the other worker is running. Queued behind the
    longest swarm test (then a 250 s chain swarm), one worker idled for ~230 s in every CI run;
    first, the alone modules wait only for each other. The slow modules come next
    so that the short ones fill the end of the run and both workers finish together."""
    rank: dict[str, int] = {}
    count: dict[str, int] = {}
    first: dict[str, int] = {}
    not_alone: dict[str, int] = {}
    for index, item in enumerate(items):
        module = _module_of(item)
        first.setdefault(module, index)
        count[module] = count.get(module, 0) + 1
        not_alone[module] = not_alone.get(module, 0) + (not _is_alone(item))
        fixtures = getattr(item, "fixturenames", ())
        if _is_alone(item) or "alone_module" in fixtures:
            kind = 0
        elif item.get_closest_marker("slow") is not None:
            kind = 1
        else:
            kind = 2
        rank[module] = min(rank.get(module, 2), kind)
    # A module marked `in_order` is one scenario told in steps (a nemesis, then the ledger of
    # everything it did): its tests go back to the order they are written in, whatever the
    # random order did. Elsewhere a module's `alone` tests go first, back to back, in their
    # shuffled order: a test of the module between two of them lets the other workers start
    # theirs, and the second waits again for all of those to end (the attack module's flood and
    # DHT tests, shuffled apart, left a worker idle ~23 s of a run).
    place = {
        id(item): (0, item.location[1] or 0)
        if item.get_closest_marker("in_order") is not None
        else (0 if _is_alone(item) else 1, index)
        for index, item in enumerate(items)
    }
    # The modules with `alone` tests run on one worker (`pytest_xdist_make_scheduler` below),
    # those with other tests too last among them: all the `alone` tests back to back.
    size = {module: not_alone[module] if rank[module] == 0 else -count[module] for module in count}
    items.sort(
        key=lambda item: (
            rank[_module_of(item)],
            size[_module_of(item)],
            first[_module_of(item)],
            place[id(item)],
        )
    )


def _is_alone(item: pytest.Item) -> bool:
    return item.get_closest_marker("alone") is not None


_holding: ExitStack | None = None  # this worker's hold on the locks, from a test's setup on
_holding_alone = False  # ...and whether it is an `alone` test's (kept for the next such test)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Take the lock before any fixture of the test is set up (a module's swarm included),
    unless the `alone` test before it on this worker kept it for this one."""
    global _holding, _holding_alone
    alone = _is_alone(item)
    if _holding is not None and not (alone and _holding_alone):
        _holding.close()
        _holding = None
    if _holding is None:
        stack = ExitStack()
        stack.enter_context(_alone_lock(alone, item.config))
        _holding, _holding_alone = stack, alone
    yield


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Let go of the lock after the test's teardown; an `alone` test followed on this worker by
    another keeps it: the others are not drained twice."""
    global _holding
    yield
    if _holding is not None and not (_holding_alone and nextitem is not None and _is_alone(nextitem)):
        _holding.close()
        _holding = None


def real_time_workers_allowed(workers: int) -> int:
    """How many workers may be on `slow` modules (real-time swarms, most of their time spent
    waiting on round timers) at once: all of them on two workers (the test command's choice on a
    busy CPU), all but one on three or more, so that one worker keeps the CPU busy with the
    in-process tests while the swarms wait."""
    return workers - 1 if workers >= 3 else workers


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under `--dist loadscope` (scripts/test.sh):
    - every module with `alone` tests is one unit of work, so that they all run on one worker,
      one after the other (their order above), while the other workers run the rest: spread over
      three workers, each `alone` test waited for the others' in turn, and the machine sat two
      thirds idle for their first minute;
    - a worker asking for work while `real_time_workers_allowed` others are on `slow` modules gets
      the first module that is not: with every worker on a real-time swarm, the CPU of 2 idle
      cores sat 40-60% idle for the suite's first four minutes, and the in-process tests then ran
      on a saturated CPU at its end."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class AloneModulesTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return ALONE_SCOPE if _marks(config.rootpath / module, "alone") else module

        def _assign_work_unit(self, node: object) -> None:
            others = [other for other in self.nodes if other is not node]
            on_real_time = sum(self._on_real_time(other) for other in others)
            if on_real_time >= real_time_workers_allowed(len(self.nodes)):
                in_process = next((scope for scope in self.workqueue if not self._real_time(scope)), None)
                if in_process is not None:
                    self.workqueue.move_to_end(in_process, last=False)  # the next one handed out
            super()._assign_work_unit(node)

        def _on_real_time(self, node: object) -> bool:
            return any(
                self._real_time(scope) and not all(done.values())
                for scope, done in self.assigned_work.get(node, {}).items()
            )

        def _real_time(self, scope: str) -> bool:
            return scope == ALONE_SCOPE or _marks(config.rootpath / scope, "slow")

    return AloneModulesTogether(config, log)


ALONE_SCOPE = "alone modules"


@functools.cache
def _marks(path: Path, mark: str) -> bool:
    """Whether a test module marks a test (or itself) with `mark` (read in the controller, which
    collects nothing: a hint for the scheduler only; the `alone` lock itself goes by the marks)."""
    try:
        text = path.read_text()
    except OSError:
        return False
    # `@pytest.mark.slow` over a test, or `pytest.mark.slow` in a module's `pytestmark` (one line or a list)
    pattern = rf"^\s*(?:@|pytestmark\s*=\s*\[?\s*)?pytest\.mark\.{mark}\b|^pytestmark\b.*\b{mark}\b"
    return re.search(pattern, text, re.MULTILINE) is not None


@pytest.fixture(scope="module")
def alone_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """`@pytest.mark.alone` for a module-scoped fixture: a swarm started once for a module's
    tests runs between them too, before the first test's own lock. Requested by that fixture,
    this holds the lock exclusively from its setup until the module's last test here is done
    (the per-test lock then takes nothing more)."""
    with _alone_lock(True, request.config):
        yield


# ---- shared fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def warm_model(tmp_path_factory: pytest.TempPathFactory) -> object:
    """A tiny model warmed up by a few supervised steps, saved as a folder every node of a
    real-process swarm loads (tests/helpers/nodes.py). Built once per session (per xdist worker):
    nodes only read it (their checkpoints go to their data dirs), and each build took 10-40 s."""
    from tests.helpers.nodes import build_warm_model

    return build_warm_model(tmp_path_factory)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """A headless chromium for a module's dashboard browser tests (tests/helpers/browser.py)."""
    from tests.helpers.browser import launched_browser

    yield from launched_browser()


@pytest.fixture
def anvil_rpc() -> Iterator[str]:
    """A local anvil chain for one test, its RPC URL (tests/helpers/chain_nodes.py)."""
    from tests.helpers.chain_nodes import running_anvil

    yield from running_anvil()
