#!/usr/bin/env bash
# Mutation testing with mutmut (3.x) over the modules whose rules the tests must pin. Not in CI:
# it runs each module's tests once per mutant (minutes to hours, see docs/architecture.md,
# "Mutation scores").
#
#     scripts/mutation.sh                              # every module below, one after another
#     scripts/mutation.sh protocol/scoring.py          # one module (or several)
#     scripts/mutation.sh --list                       # the modules and the tests each one runs
#
# Each module runs in its own scratch copy of the tree (MUTATION_DIR, default
# /tmp/swarmp2p-mutation/<module>), so the shared working tree never gets a `mutants/` folder
# and two modules never share mutmut's cache. The copy's [tool.mutmut] is pyproject.toml's with
# `only_mutate` narrowed to the module and the test selection set to the module's own tests:
# mutmut runs, for each mutant, only the selected tests that call the mutated function.
# Afterwards, in the copy: `mutmut show <name>` prints a mutant's diff, `mutmut results` the
# survivors. MUTATION_TESTS="<paths or node ids>" replaces the module's tests. Niced: the
# machine is shared.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
SCRATCH="${MUTATION_DIR:-/tmp/swarmp2p-mutation}"
MUTMUT="${MUTMUT:-$ROOT/.venv/bin/mutmut}"

# module -> its tests (globs under tests/, any layer folder: files move between folders).
# Not listed: protocol/limits.py, messages.py and tasks.py hold constants, attrs types and a
# Protocol only (mutmut mutates function bodies: nothing to mutate).
declare -A TESTS=(
    [protocol/acr.py]="test_protocol_acr.py test_node_acr.py test_pinned_rules.py"
    [protocol/admission.py]="test_admission_*.py test_round_core.py test_protocol_acr.py test_protocol_fetch_capture.py test_pinned_rules.py test_pinned_fetcher.py test_pinned_admission.py"
    [protocol/codec.py]="test_protocol_codec.py test_rules_codec.py test_protocol_vectors.py test_pinned_codec.py test_pinned_codec_fast_path.py"
    [protocol/decisions.py]="test_admission_rules.py test_pinned_rules.py"
    [protocol/fetch_draw.py]="test_admission_rules.py test_protocol_sampling_rules.py test_pinned_rules.py"
    [protocol/staged.py]="test_protocol_acr.py test_pinned_rules.py"
    [protocol/answer_verify.py]="test_protocol_games.py test_sim_answer_verify.py test_pinned_rules.py test_pinned_answer_verify.py"
    [protocol/deferred.py]="test_admission_defer*.py test_pinned_rules.py"
    [protocol/envelope.py]="test_protocol_envelope.py test_protocol_vectors.py test_pinned_envelope.py"
    [protocol/errors.py]="test_protocol_codec.py test_rules_codec.py test_protocol_envelope.py test_pinned_errors.py"
    [protocol/game.py]="test_admission_rules.py test_protocol_questions.py test_protocol_games.py test_pinned_rules.py test_pinned_game.py"
    [protocol/games.py]="test_protocol_games.py test_protocol_acr.py test_pinned_rules.py"
    [protocol/inputs.py]="test_protocol_acr.py test_node_acr.py test_pinned_rules.py test_pinned_inputs.py"
    [protocol/logprobs.py]="test_protocol_logprobs.py test_pinned_logprobs.py"
    [protocol/questions.py]="test_protocol_questions.py test_one_eval_set.py test_pinned_questions.py"
    [protocol/rounds.py]="test_protocol_rounds.py test_round_core.py test_round_collect_deadline.py test_protocol_acr.py test_pinned_rules.py"
    [protocol/sampling.py]="test_protocol_sampling*.py test_pinned_sampling.py"
    [protocol/seeds.py]="test_admission_rules.py test_fastpath_rules.py test_protocol_purity.py test_pinned_rules.py test_pinned_seeds.py"
    [protocol/scoring.py]="test_protocol_scoring.py test_pinned_rules.py"
    [protocol/sender_map.py]="test_sender_map.py test_fastpath_rules.py test_pinned_sender_map.py"
    [protocol/stage_inputs.py]="test_protocol_acr.py test_protocol_games.py test_pinned_rules.py test_pinned_stage_inputs.py"
    [protocol/stage_schedule.py]="test_one_timeline.py test_chain_stage_duration.py test_pinned_rules.py"
    [protocol/verification.py]="test_protocol_verification.py test_pinned_rules.py"
    [trainer/evaluation.py]="test_trainer_evaluation.py test_sliced_evaluation.py test_pinned_evaluation.py"
    [trainer/grpo.py]="test_trainer_offpolicy.py test_trainer_policy.py test_trainer_precision.py test_trainer_trl_parity.py test_pinned_evaluation.py test_pinned_training.py"
    [trainer/selection.py]="test_train_selection.py test_pinned_training.py"
    [trainer/tasks.py]="test_trainer_tasks.py test_pinned_evaluation.py test_pinned_training.py"
    [swarmp2p/fetcher.py]="test_peer_inbound.py test_pushed_batches.py test_pinned_fetcher.py test_pinned_fetch.py"
    [swarmp2p/fetch_queue.py]="test_fetch_queue.py test_pinned_fetcher.py test_pinned_fetch.py"
    [swarmp2p/net/gossip.py]="test_net_gossip_*.py test_pinned_gossip.py test_pinned_net_limits.py test_net_drops_counted.py test_net_origin_limit.py test_net_relay_path.py"
    [swarmp2p/net/origin_limit.py]="test_net_origin_limit.py test_pinned_gossip.py test_pinned_net_limits.py"
)

tests_of() {  # the test files for module $1 that exist now, as paths
    local pattern
    for pattern in ${TESTS[$1]}; do
        find tests -name "$pattern" -not -path '*/helpers/*' | sort
    done
}

if [[ "${1:-}" == "--list" ]]; then
    for module in $(printf '%s\n' "${!TESTS[@]}" | sort); do
        echo "$module: $(tests_of "$module" | tr '\n' ' ')"
    done
    exit 0
fi

modules=("$@")
if [[ ${#modules[@]} -eq 0 ]]; then
    mapfile -t modules < <(printf '%s\n' "${!TESTS[@]}" | sort)
fi

for module in "${modules[@]}"; do
    if [[ -z "${TESTS[$module]:-}" ]]; then
        echo "unknown module $module (scripts/mutation.sh --list)" >&2
        exit 2
    fi
    if [[ -n "${MUTATION_TESTS:-}" ]]; then
        # The tests to run instead (paths or node ids): e.g. leaving out a test that fails on the
        # unmutated tree, which mutmut refuses to start with.
        read -r -a tests <<<"$MUTATION_TESTS"
    else
        mapfile -t tests < <(tests_of "$module")
    fi
    if [[ ${#tests[@]} -eq 0 ]]; then
        echo "$module: no test files found" >&2
        exit 2
    fi
    work="$SCRATCH/${module//\//_}"
    rm -rf "$work"
    mkdir -p "$work"
    # The importable packages, the tests and the build configuration; the C loop (*.so) too, so
    # the mutated protocol/ behaves as installed.
    tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' \
        -cf - pyproject.toml setup.py protocol trainer swarmp2p simulator tests \
        $(test -d netlab && echo netlab) | tar -C "$work" -xf -
    "$ROOT/.venv/bin/python" - "$work/pyproject.toml" "$module" "${tests[@]}" <<'EOF'
import sys
import tomllib

import tomli_w

path, module, tests = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(path, "rb") as f:
    data = tomllib.load(f)
config = data["tool"]["mutmut"]
config["only_mutate"] = [module]
config["pytest_add_cli_args_test_selection"] = tests
with open(path, "wb") as f:
    tomli_w.dump(data, f)
EOF
    echo "== $module: ${tests[*]}"
    started=$(date +%s)
    # One torch thread: a forked mutant's torch thread pool can deadlock at 0% CPU, where
    # mutmut's CPU-time limit never fires (seen in trainer/grpo.py's completion_logps).
    (cd "$work" && OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 10 "$MUTMUT" run --max-children "${MUTATION_CHILDREN:-1}" >run.log 2>&1) || {
        tail -30 "$work/run.log"
        echo "$module: mutmut failed (log: $work/run.log)" >&2
        exit 1
    }
    seconds=$(($(date +%s) - started))
    (cd "$work" && "$MUTMUT" results --all true >results.txt 2>&1) || true
    # `results --all true` prints "<mutant>: <status>" per mutant. A mutant that makes the tests
    # run past mutmut's timeout (an endless loop) is caught too: counted with the killed.
    total=$(grep -c ': ' "$work/results.txt" || true)
    killed=$(grep -c -E ': (killed|timeout)$' "$work/results.txt" || true)
    timeouts=$(grep -c ': timeout$' "$work/results.txt" || true)
    echo "$module: killed $killed / $total ($timeouts by timeout) in ${seconds}s (all results: $work/results.txt)"
    grep -v -E ': (killed|timeout)$' "$work/results.txt" | sed 's/^/    /' || true
done
