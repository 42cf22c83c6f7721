#!/usr/bin/env bash
# Every test module in a pytest process of its own, in file order, one after another: a test that
# passes only after another module's tests (a fixture's side effect, a module-level cache, a file
# left behind) fails here. Not in CI (it pays pytest's and torch's start-up once per module: about
# an hour on 2 cores). Random order inside and across modules is the test command's default
# (pytest-randomly; `-p no:randomly` turns it off, `--randomly-seed=N` replays one).
#
#     scripts/each_alone.sh                     # every module under tests/
#     scripts/each_alone.sh tests/protocol      # the modules under one folder
#
# Prints one line per module (rc, seconds, path) and ends with the failed ones; the logs are in
# EACH_ALONE_DIR (default /tmp/swarmp2p-each-alone), one per module.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${EACH_ALONE_DIR:-/tmp/swarmp2p-each-alone}"
mkdir -p "$OUT"
failed=()
total=0
while IFS= read -r module; do
    total=$((total + 1))
    name="${module//\//_}"
    start=$(date +%s)
    python -m pytest -q -p no:randomly -p no:cacheprovider --basetemp="$OUT/tmp-$name" "$module" \
        >"$OUT/$name.log" 2>&1
    rc=$?
    rm -rf "$OUT/tmp-$name"
    printf '%s %5ds %s\n' "$rc" "$(($(date +%s) - start))" "$module"
    # rc 5: a module whose tests all deselect themselves (none collected) is not a failure.
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
        failed+=("$module")
    fi
done < <(find "${@:-tests}" -name 'test_*.py' -not -path '*/helpers/*' | sort)
echo "== ${#failed[@]} of $total modules failed alone"
for module in "${failed[@]}"; do
    echo "   $module ($OUT/${module//\//_}.log)"
done
[ "${#failed[@]}" -eq 0 ]
