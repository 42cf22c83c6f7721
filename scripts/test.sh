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
python -m pytest --durations=30 "$@"
