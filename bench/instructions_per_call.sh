#!/usr/bin/env bash
# Instructions per collective call, counted by callgrind (deterministic where time is not:
# the same binary and inputs give the same counts on a busy machine and a quiet one).
#
#   bench/instructions_per_call.sh [-n RANKS] [--op allreduce] [--bytes 8] [--calls N]
#                                  [--mode lead|block]
#
# --mode lead (default): the per-call path of a rank that never waits. Rank 0 runs
#   `plait bench` under callgrind; the others run natively and spin (PLAIT_WAIT=spin), so
#   they are always first: every flag rank 0 looks for is already raised, and what it
#   executes is the call itself (validation, the Work, the engine, the algorithm, the
#   reduction and the flags), with no idle polling, whose count would follow the scheduler.
#   Only the bench's timed loop is counted (--toggle-collect), and
#   (count(N2) - count(N1)) / (N2 - N1) leaves out its setup. A run in which rank 0 had to
#   wait after all (the machine was busy) is retried; the count says how many calls waited.
# --mode block: every rank under callgrind with PLAIT_WAIT=block (waits sleep): the call plus
#   the hand-over to the engine thread that finishes it, whole process, all threads.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
plait=${PLAIT_BIN:-$here/../build/tools/plait/plait}
ranks=2 op=allreduce bytes=8 n1=2000 n2=12000 mode=lead
while [ $# -gt 0 ]; do
  case "$1" in
    -n) ranks=$2; shift ;;
    --op) op=$2; shift ;;
    --bytes) bytes=$2; shift ;;
    --calls) n2=$2; shift ;;
    --mode) mode=$2; shift ;;
    *) echo "usage: $0 [-n RANKS] [--op OP] [--bytes B] [--calls N] [--mode lead|block]" >&2; exit 2 ;;
  esac
  shift
done
command -v valgrind >/dev/null || { echo "error: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
command -v callgrind_annotate >/dev/null || { echo "error: callgrind_annotate not found (apt-get install valgrind)" >&2; exit 1; }
[ -x "$plait" ] || { echo "error: $plait not built (make build)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bench_args=(bench "$op" --min "$bytes" --max "$bytes" --warmup 10)

# lead: "instructions waits" of rank 0's timed loop, for a job of N calls.
lead_job() {
  local calls=$1 out=$work/lead.$1
  "$plait" run -n "$ranks" --bind none -- bash -c '
    if [ "$PLAIT_RANK" = 0 ]; then
      exec valgrind --tool=callgrind --toggle-collect="plait::cli::*measure*" \
        --callgrind-out-file="$0" "$1" "${@:2}"
    else
      PLAIT_WAIT=spin exec "$1" "${@:2}"
    fi' "$out" "$plait" "${bench_args[@]}" --iters "$calls" >/dev/null 2>&1
  local total waits
  total=$(awk '/^totals:/ { print $2 }' "$out")
  # Calls of CommEngine::drive: the waits (a call done when its submit returns never drives).
  waits=$(callgrind_annotate --tree=caller "$out" 2>/dev/null |
    grep -B1 -E '\*  .*CommEngine::drive\(' | grep -E '^ *[0-9,]+ .*< ' | head -1 |
    sed -E 's/.*\(([0-9,]+)x\).*/\1/; s/,//g' || true)
  echo "$total ${waits:-0}"
}

# block: per rank, the instructions its whole process executed, for a job of N calls.
block_job() {
  local calls=$1 dir=$work/$1
  mkdir -p "$dir"
  PLAIT_WAIT=block "$plait" run -n "$ranks" -- valgrind --tool=callgrind \
    --callgrind-out-file="$dir/cg.%q{PLAIT_RANK}" "$plait" "${bench_args[@]}" --iters "$calls" \
    >/dev/null 2>&1
  for ((r = 0; r < ranks; r++)); do
    awk '/^totals:/ { print $2 }' "$dir/cg.$r"
  done
}

if [ "$mode" = lead ]; then
  # Only a pair of runs in which rank 0 never waited counts: a wait moves work between the
  # two runs unevenly, and their difference could come out too high or too low.
  per="" waited=""
  for attempt in 1 2 3 4 5 6; do
    read -r a wa < <(lead_job "$n1")
    read -r b wb < <(lead_job "$n2")
    if [ -z "${a:-}" ] || [ -z "${b:-}" ] || [ "$b" -le "$a" ]; then
      echo "error: a job under callgrind failed (run it by hand: plait run -n $ranks ... valgrind plait bench ...)" >&2
      exit 1
    fi
    per=$(( (b - a) / (n2 - n1) )) waited="$wa of $n1 and $wb of $n2"
    [ "$wa" = 0 ] && [ "$wb" = 0 ] && break
  done
  echo "# $op $bytes B, $ranks ranks: instructions per call of a rank that never waits (callgrind)"
  printf 'rank 0  %8d   (calls that waited: %s)\n' "$per" "$waited"
  if [ "$wa" != 0 ] || [ "$wb" != 0 ]; then
    echo "warning: rank 0 waited in every attempt (a busy machine?): the count is not the per-call path alone" >&2
  fi
  exit 0
fi
[ "$mode" = block ] || { echo "error: --mode is lead or block" >&2; exit 2; }
mapfile -t a < <(block_job "$n1")
mapfile -t b < <(block_job "$n2")
echo "# $op $bytes B, $ranks ranks: instructions per call (whole process, all threads, callgrind, PLAIT_WAIT=block)"
sum=0
for ((r = 0; r < ranks; r++)); do
  per=$(( (b[r] - a[r]) / (n2 - n1) ))
  sum=$((sum + per))
  printf 'rank %d  %8d\n' "$r" "$per"
done
printf 'mean    %8d\n' $((sum / ranks))
