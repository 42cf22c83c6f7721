#!/usr/bin/env bash
# The test command (README "Run the tests"): installs what the tests need, then runs the whole suite.
# Run it inside the project's virtual environment (see README).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== test dependencies (pip extras)"
python -m pip install -q torch==2.13.0 -e '.[test]'

echo "== test dependencies (npm: anvil for the real-chain test, js-libp2p for the interop test)"
for dir in tools/anvil interop/js; do
    if [ -f "$dir/package.json" ]; then
        npm install --prefix "$dir" --no-audit --no-fund --loglevel=error
    fi
done

# Python may cache bytecode here, whatever the environment says: the suite starts some hundreds of
# Python processes (nodes, CLI runs, pytest runs of generated suites) on the project's own
# source, which pip's editable install leaves uncompiled. With PYTHONDONTWRITEBYTECODE=1 (set
# in some images, this machine's among them) each of them compiled that source again, and each
# xdist worker rewrote every test module's asserts again: a collection took 17.2 s of CPU
# where 8.7 s with the cache (`pytest --collect-only`, the second run).
unset PYTHONDONTWRITEBYTECODE

echo "== lint"
ruff check .

echo "== tests"
# Workers: SWARMP2P_TEST_WORKERS if set (0 runs the tests in this process, one at a time), else 4
# when most of the CPU is idle as the tests start, else 2. Most `slow` tests wait on real-time
# rounds of live node processes; the rest run in-process on the CPU. On three or more workers
# one worker stays on the in-process tests while the others run the real-time swarms
# (tests/conftest.py's scheduler), so the CPU the swarms leave idle is used: with every worker
# on a swarm, 2 idle cores sat 40-60% idle for the run's first four minutes. Beside other work
# (two busy loops: no idle CPU) more workers would only start more node processes than the
# round timings allow for.
workers() {
    if [ -n "${SWARMP2P_TEST_WORKERS:-}" ]; then
        echo "$SWARMP2P_TEST_WORKERS"
    elif [ "$(idle_percent)" -ge 60 ]; then
        echo 4
    else
        echo 2
    fi
}
idle_percent() {  # share of CPU time idle over the next 2 s, from /proc/stat
    local a b
    read -r -a a < /proc/stat
    sleep 2
    read -r -a b < /proc/stat
    local total=0 i
    for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
    echo $((100 * (b[4] + b[5] - a[4] - a[5]) / (total > 0 ? total : 1)))
}
WORKERS=$(workers)
echo "workers: $WORKERS (SWARMP2P_TEST_WORKERS sets it)"
# --dist loadscope: a module's tests run on one worker. With `load` they were handed out one by one,
# and a module whose swarm is a module fixture started one per worker (the ordered nemesis of
# tests/net/test_netns_nemesis.py ran half on each). Not `loadgroup` with marks: pytest 9.2 ignores
# them (pytest-xdist issue #1386: the tests are spread as if unmarked). The modules go out in the
# order tests/conftest.py gives them: those with `alone` tests first (queued behind a 250 s
# chain swarm, one waited ~230 s with its worker idle: 1238 s -> 1136 s for the whole suite), then
# the slow ones, then the rest. The modules with `alone` tests are one unit of work
# (conftest's pytest_xdist_make_scheduler): their `alone` tests run back to back on one worker
# while, on three or more workers, one other goes on beside them.
# Random order (pytest-randomly, in the test extra): tests/conftest.py keeps the module order
# above and the order of the tests inside each module changes every run; the seed is printed at
# the top, and `--randomly-seed=N` replays a run's order, `-p no:randomly` turns it off.
# scripts/each_alone.sh runs every module in a process of its own (not here: an hour on 2 cores).
python -m pytest -n "$WORKERS" --dist loadscope --durations=30 "$@"
