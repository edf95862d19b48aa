#!/usr/bin/env bash
# Runs plait's fuzz targets (docs/fuzzing.md): installs clang 16 if missing, configures and
# builds the `fuzz` preset, then runs each target for FUZZ_SECONDS over its corpus and merges
# what it found back into fuzz/corpus/<target>, minimized. Ends with a table of seconds,
# executions, exec/s and crashes per target; exits 1 if any target crashed.
#
#   scripts/fuzz.sh [TARGET...]      every target by default
#   FUZZ_SECONDS=600                 per target
#   FUZZ_BUILD=0                     skip install, configure and build (already done)
#   JOBS=2                           build jobs
#
# A crashing input is saved as build-fuzz/artifacts/<target>/crash-<sha1> (or leak-, timeout-,
# oom-); reproduce it with build-fuzz/fuzz/<target>_fuzz <that file>.
set -uo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-600}
FUZZ_BUILD=${FUZZ_BUILD:-1}
JOBS=${JOBS:-$(nproc)}
BUILD=build-fuzz
ALL=(store_request store_reply auth_handshake tcp_hello tcp_stream tcp_streams tune_file shm_ring
     shm_segment checkpoint_file ps_control deadline_wire ucx_wire shuffle_wire stall_state)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${ALL[@]}")

# Debian 12's clang is 14, which cannot build src/ (C++20 lambda captures of structured
# bindings came in clang 16); libclang-rt-16-dev holds libFuzzer.
CLANG_PACKAGES=(clang-16 libclang-rt-16-dev)

if [ "$FUZZ_BUILD" != 0 ]; then
  bash scripts/install-deps.sh || exit 1
  bash scripts/install-deps.sh "${CLANG_PACKAGES[@]}" || exit 1
  cmake --preset fuzz >/dev/null || exit 1
  cmake --build --preset fuzz -j "$JOBS" --target "${targets[@]/%/_fuzz}" || exit 1
fi

# Merges the corpus and this run's finds into the smallest set with the same coverage; the
# hand-made seeds (seed-*) and the inputs of fixed bugs (regression-*) always stay.
merge_back() {
  local bin=$1 corpus=$2 scratch=$3 fresh
  fresh=$(mktemp -d "$BUILD/merge.XXXXXX")
  cp "$corpus"/seed-* "$corpus"/regression-* "$fresh"/ 2>/dev/null
  if "$bin" -merge=1 "$fresh" "$corpus" "$scratch" >"$fresh.log" 2>&1; then
    find "$corpus" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'regression-*' -delete
    find "$fresh" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'regression-*' \
      -exec cp {} "$corpus"/ \;
    rm -f "$fresh.log"
  else
    echo "  merge failed, corpus left as it was (log: $fresh.log)"
  fi
  rm -rf "$fresh"
}

declare -A secs execs rates crashes
failed=0
for t in "${targets[@]}"; do
  bin=$BUILD/fuzz/${t}_fuzz
  corpus=fuzz/corpus/$t
  scratch=$BUILD/scratch/$t
  artifacts=$BUILD/artifacts/$t
  log=$BUILD/logs/$t.log
  [ -x "$bin" ] || { echo "error: $bin is not built" >&2; exit 1; }
  rm -rf "$scratch"
  mkdir -p "$scratch" "$corpus" "$artifacts" "$(dirname "$log")"
  before=$(find "$artifacts" -type f | wc -l)
  touch "$log.start"
  echo "== $t: ${FUZZ_SECONDS} s over $corpus (log: $log)"
  start=$(date +%s)
  # -timeout above the harnesses' own hang checks, so theirs is the message one sees.
  "$bin" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -timeout=30 \
    -artifact_prefix="$artifacts/" "$scratch" "$corpus" >"$log" 2>&1
  rc=$?
  secs[$t]=$(( $(date +%s) - start ))
  execs[$t]=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  execs[$t]=${execs[$t]:-0}
  rates[$t]=$(( execs[$t] / (secs[$t] > 0 ? secs[$t] : 1) ))
  crashes[$t]=$(( $(find "$artifacts" -type f | wc -l) - before ))
  if [ $rc -ne 0 ] || [ "${crashes[$t]}" -gt 0 ]; then
    failed=1
    saved=$(find "$artifacts" -type f -newer "$log.start" | head -3 | tr '\n' ' ')
    echo "  CRASH (exit $rc): $saved"
    grep -m3 -E 'ERROR: |fuzz invariant failed|runtime error' "$log" | sed 's/^/  /'
  fi
  echo "  ${secs[$t]} s, ${execs[$t]} executions"
  merge_back "$bin" "$corpus" "$scratch"
done

echo
printf '%-16s %8s %12s %9s %8s\n' target seconds executions exec/s crashes
for t in "${targets[@]}"; do
  printf '%-16s %8s %12s %9s %8s\n' "$t" "${secs[$t]}" "${execs[$t]}" "${rates[$t]}" \
    "${crashes[$t]}"
done
exit $failed
