#!/usr/bin/env bash
# Instructions per collective call, counted by callgrind (deterministic where time is not:
# the same binary and inputs give the same counts on a busy machine and a quiet one).
#
#   bench/instructions_per_call.sh [-n RANKS] [--op allreduce] [--bytes 8] [--calls N]
#
# Every rank runs `plait bench` under callgrind, twice: N1 and N2 calls. What a call costs is
# everything the rank's process executed, in all its threads (the call, its wait, progress
# and engine threads), and (total(N2) - total(N1)) / (N2 - N1) leaves out setup, warm-up and
# teardown. Waits sleep (PLAIT_WAIT=block) instead of polling: idle polling would count as
# many instructions as the peer's scheduling makes it, while sleeping ranks count only the
# work (the call, the engine thread that finishes it, the hand-over between the two).
# Repeated runs agree within a few percent. Prints per rank, and the mean.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
plait=${PLAIT_BIN:-$here/../build/tools/plait/plait}
ranks=2 op=allreduce bytes=8 n1=2000 n2=12000
while [ $# -gt 0 ]; do
  case "$1" in
    -n) ranks=$2; shift ;;
    --op) op=$2; shift ;;
    --bytes) bytes=$2; shift ;;
    --calls) n2=$2; shift ;;
    *) echo "usage: $0 [-n RANKS] [--op OP] [--bytes B] [--calls N]" >&2; exit 2 ;;
  esac
  shift
done
command -v valgrind >/dev/null || { echo "error: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
[ -x "$plait" ] || { echo "error: $plait not built (make build)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Per rank, the instructions its process executed, for one job of N calls.
job() {
  local calls=$1 dir=$work/$1
  mkdir -p "$dir"
  PLAIT_WAIT=block "$plait" run -n "$ranks" -- valgrind --tool=callgrind \
    --callgrind-out-file="$dir/cg.%q{PLAIT_RANK}" "$plait" bench "$op" --min "$bytes" \
    --max "$bytes" --iters "$calls" --warmup 10 >/dev/null 2>&1
  for ((r = 0; r < ranks; r++)); do
    awk '/^totals:/ { print $2 }' "$dir/cg.$r"
  done
}

mapfile -t a < <(job "$n1")
mapfile -t b < <(job "$n2")
echo "# $op $bytes B, $ranks ranks: instructions per call (whole process, all threads, callgrind)"
sum=0
for ((r = 0; r < ranks; r++)); do
  per=$(( (b[r] - a[r]) / (n2 - n1) ))
  sum=$((sum + per))
  printf 'rank %d  %8d\n' "$r" "$per"
done
printf 'mean    %8d\n' $((sum / ranks))
