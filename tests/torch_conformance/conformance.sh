#!/bin/bash
# torch's DistributedTest suite on gloo and on plait, side by side, and the verdict: every test
# that passes on gloo passes on plait, except those named in exceptions.tsv.
#
#   tests/torch_conformance/conformance.sh                    # 2 and 3 ranks, the whole suite
#   tests/torch_conformance/conformance.sh 2 -- -k all_reduce # a subset (make test's)
#
# Per world size: run_suite.sh gloo, run_suite.sh plait, then the tests that passed on gloo
# and not on plait again on plait under the name "gloo" (the suite gates ~30 tests to that
# name), then verdict.py's table. OUT_ROOT (default /tmp/conformance) keeps every run's files.
# Exits 1 when a verdict fails.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sizes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sizes+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ ${#sizes[@]} -gt 0 ] || sizes=(2 3)
out=${OUT_ROOT:-/tmp/conformance}
python=${PYTHON:-$here/../../.venv/bin/python}
status=0
tables=()
for ws in "${sizes[@]}"; do
  "$here/run_suite.sh" gloo "$ws" "$out" -- "$@" > /dev/null
  "$here/run_suite.sh" plait "$ws" "$out" -- "$@" > /dev/null
  comm -23 "$out/gloo-$ws/passed.txt" "$out/plait-$ws/passed.txt" > "$out/gap-$ws.txt"
  rm -rf "$out/as-gloo/plait-$ws"
  if [ -s "$out/gap-$ws.txt" ]; then
    CONFORMANCE_AS=gloo "$here/run_suite.sh" plait "$ws" "$out/as-gloo" -- \
      $(sed 's/^/TestDistBackendWithSpawn./' "$out/gap-$ws.txt") > /dev/null
  fi
  "$python" "$here/verdict.py" "$out/gloo-$ws" "$out/plait-$ws" "$out/as-gloo/plait-$ws" \
    > "$out/verdict-$ws.md" || status=1
  cat "$out/verdict-$ws.md"
  echo
done
exit $status
