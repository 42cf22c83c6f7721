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

echo "== lint"
ruff check .

echo "== tests"
# Two workers by default (SWARMP2P_TEST_WORKERS=0 runs them in this process, one at a time): most
# tests wait on real-time rounds of live node processes, so on 2 cores the suite took 36 min one
# test at a time (the same with a busy-loop using half a core beside it) and 24.5 min on 2 workers,
# tests marked `alone` (tests/conftest.py) included. More workers than cores start more node
# processes at once than the round timings allow for.
# --dist loadscope: a module's tests run on one worker. With `load` they were handed out one by one,
# and a module whose swarm is a module fixture started one per worker (the ordered nemesis of
# tests/net/test_netns_nemesis.py ran half on each). Not `loadgroup` with marks: pytest 9.2 ignores
# them (pytest-xdist issue #1386: the tests are spread as if unmarked). The modules go out in the
# order tests/conftest.py gives them: those with `alone` tests first (queued behind a 250 s
# chain swarm, one waited ~230 s with its worker idle: 1238 s -> 1136 s for the whole suite), then
# the slow ones, then the rest.
# Random order (pytest-randomly, in the test extra): tests/conftest.py keeps the module order
# above and the order of the tests inside each module changes every run; the seed is printed at
# the top, and
# `--randomly-seed=N` replays a run's order, `-p no:randomly` turns it off.
# scripts/each_alone.sh runs every module in a process of its own (not here: an hour on 2 cores).
python -m pytest -n "${SWARMP2P_TEST_WORKERS:-2}" --dist loadscope --durations=30 "$@"
