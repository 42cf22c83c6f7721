#!/usr/bin/env bash
# bench/gpu_check.py on a bare GPU machine (torch and transformers, no internet): install what is
# missing from bench/wheelhouse (filled beforehand by bench/gpu_wheels.py, where an index is
# reachable), then run every part and print the table. Arguments go to gpu_check.py:
#
#   bench/gpu_check.sh                          # --device cuda
#   bench/gpu_check.sh --device cuda:0 --json "$OUT/gpu_check.json"
#   bench/gpu_check.sh --device cpu --small     # the same parts on CPU, tiny shapes
#
# The project runs from this checkout (PYTHONPATH), not from a wheel: the figures are of the code
# that travelled with it. Python: $PYTHON, else python3.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=${GPU_CHECK_WHEELS:-bench/wheelhouse}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# No internet there: nothing may wait on a hub timeout (every model and dataset is built locally).
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1

if ! "$PY" -c "import trl, reasoning_gym, libp2p, web3, vyper, trio" 2>/dev/null; then
    if [ ! -f "$WHEELS/requirements.txt" ]; then
        echo "gpu_check: trl, reasoning-gym or the project's dependencies are missing and $WHEELS has no" \
             "requirements.txt: fill it with bench/gpu_wheels.py first (docs/benchmarks.md)" >&2
        exit 2
    fi
    started=$SECONDS
    # --no-index: nothing is fetched; a package the machine already has at a fitting version stays.
    if ! "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" -r "$WHEELS/requirements.txt"; then
        # trl pulls datasets, whose pins (pyarrow, fsspec) are the likeliest to clash with the
        # machine's own packages: without it every part but TRL's rows can still run and report.
        echo "gpu_check: the install failed (above); installing without trl: the TRL rows will fail" >&2
        grep -v -i '^trl' "$WHEELS/requirements.txt" > "${TMPDIR:-/tmp}/gpu_check_requirements.txt"
        "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" \
            -r "${TMPDIR:-/tmp}/gpu_check_requirements.txt" ||
            echo "gpu_check: the project's dependencies did not install either; running what can run" >&2
    fi
    echo "gpu_check: install step took $((SECONDS - started)) s" >&2
fi
exec "$PY" bench/gpu_check.py "$@"
