#!/bin/bash
# Run PyTorch's DistributedTest suite for one backend and world size.
#
#   tests/torch_conformance/run_suite.sh BACKEND WORLD_SIZE [OUT_ROOT] [-- unittest args]
#
# Writes OUT_ROOT/BACKEND-WORLD_SIZE/ (OUT_ROOT defaults to /tmp/conformance):
#   log.txt          full output of the run (unittest -v plus every rank's log)
#   results.tsv      name<TAB>outcome<TAB>seconds<TAB>detail, one line per test
#   passed.txt skipped.txt failed.txt errored.txt   test names per outcome
#   missing.txt      tests that never reported (the run was killed or crashed)
#   summary.txt      counts and wall time (also printed)
#
# Environment knobs:
#   SUITE_TIMEOUT                      whole-run limit in seconds (default 10800)
#   DISTRIBUTED_TESTS_DEFAULT_TIMEOUT  per-test limit used by the suite (default 300;
#                                      test_ddp_uneven_inputs has its own 400)
#   PYTHON                             interpreter (default .venv/bin/python: torch 2.15)
#   PLAIT_PYTHON_DIR                   the plait package's directory (default build/python)
set -u
if [ $# -lt 2 ]; then
    echo "usage: $0 BACKEND WORLD_SIZE [OUT_ROOT] [-- unittest args, e.g. -k all_reduce]" >&2
    exit 2
fi
backend=$1; ws=$2; shift 2
out_root=/tmp/conformance
if [ $# -gt 0 ] && [ "$1" != "--" ]; then out_root=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then shift; fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
out=$out_root/$backend-$ws
mkdir -p "$out"
rm -f "$out"/{log.txt,results.tsv,passed.txt,skipped.txt,failed.txt,errored.txt,missing.txt,summary.txt}

work=$(mktemp -d /tmp/torch_conformance.XXXXXX)
mkdir -p "$work/barrier" "$work/test_dir"

# file:// as upstream run_test.py does for the spawn suite: TestDistBackend.setUp points
# the ranks at a per-test file:// anyway; the parent's value only decides whether
# test_barrier_timeout_global (file:// only) is skipped.
export BACKEND=$backend WORLD_SIZE=$ws TEMP_DIR=$work INIT_METHOD=${INIT_METHOD:-file://$work/shared_init_file}
export PYTHONPATH=$here:${PLAIT_PYTHON_DIR:-$repo/build/python}${PYTHONPATH:+:$PYTHONPATH}
export CONFORMANCE_RESULTS=$out/results.tsv
export DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=${DISTRIBUTED_TESTS_DEFAULT_TIMEOUT:-300}
unset CI
: > "$out/results.tsv"

start=$(date +%s)
# timeout runs the job in its own process group and signals the whole group, so
# spawned ranks go too. cd to the scratch dir: the suite writes files into cwd.
(cd "$work" && timeout --kill-after=30 "${SUITE_TIMEOUT:-10800}" \
    "$python" "$here/run_distributed_test.py" "$@") > "$out/log.txt" 2>&1
rc=$?
end=$(date +%s)
secs=$((end - start))
rm -rf "$work"

for o in passed skipped failed errored; do
    awk -F'\t' -v o="$o" '$2 == o { print $1 }' "$out/results.tsv" | sort > "$out/$o.txt"
done
# Tests that were selected but never reported (killed by the overall timeout).
grep -oE '^test_[A-Za-z0-9_]+ \(__main__\.' "$out/log.txt" | sed 's/ (__main__\.//' | sort -u \
    | comm -23 - <(cut -f1 "$out/results.tsv" | sort -u) > "$out/missing.txt"

{
    echo "backend=$backend world_size=$ws rc=$rc wall=${secs}s ($((secs / 60))m$((secs % 60))s)"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "WARNING: the whole run hit SUITE_TIMEOUT=${SUITE_TIMEOUT:-10800}s"
    for o in passed skipped failed errored missing; do
        printf '%-8s %4d\n' "$o" "$(wc -l < "$out/$o.txt")"
    done
    echo "slowest tests (s):"
    sort -t$'\t' -k3,3 -rn "$out/results.tsv" | head -10 | awk -F'\t' '{ printf "  %7.1f  %-8s %s\n", $3, $2, $1 }'
} | tee "$out/summary.txt"
exit "$rc"
