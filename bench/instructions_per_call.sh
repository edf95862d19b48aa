#!/usr/bin/env bash
# Instructions per collective call, counted by callgrind (deterministic where time is not:
# the same binary and inputs give the same counts on a busy machine and a quiet one).
#
#   bench/instructions_per_call.sh [-n RANKS] [--op allreduce] [--bytes 8] [--calls N]
#
# Every rank runs `plait bench` under callgrind, twice: N1 and N2 calls. What a call costs is
# the inclusive count of the user's call (Communicator::<op>) plus its Work::wait(), and
# (cost(N2) - cost(N1)) / (N2 - N1) leaves out setup, warm-up and teardown. Waits spin
# (PLAIT_WAIT=spin), so a wait's idle polling counts too: under valgrind the peer's reply is
# usually there by the time the call has posted its messages, and that share is small.
# Prints per rank, and the mean.
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

# Per rank, the inclusive instructions of the call and of its wait, for one job of N calls.
job() {
  local calls=$1 dir=$work/$1
  mkdir -p "$dir"
  PLAIT_WAIT=spin "$plait" run -n "$ranks" -- valgrind --tool=callgrind \
    --callgrind-out-file="$dir/cg.%q{PLAIT_RANK}" "$plait" bench "$op" --min "$bytes" \
    --max "$bytes" --iters "$calls" --warmup 10 >/dev/null 2>&1
  for ((r = 0; r < ranks; r++)); do
    callgrind_annotate --inclusive=yes --threshold=100 "$dir/cg.$r" 2>/dev/null |
      awk -v op="$op" '
        { gsub(",", "", $1) }
        $0 ~ ("CommunicatorImpl::" op "\\(") { call += $1 }
        $0 ~ /WorkImpl::wait\(\)/ { wait += $1 }
        END { printf "%d\n", call + wait }'
  done
}

mapfile -t a < <(job "$n1")
mapfile -t b < <(job "$n2")
echo "# $op $bytes B, $ranks ranks: instructions per call (the call and its wait, callgrind)"
sum=0
for ((r = 0; r < ranks; r++)); do
  per=$(( (b[r] - a[r]) / (n2 - n1) ))
  sum=$((sum + per))
  printf 'rank %d  %8d\n' "$r" "$per"
done
printf 'mean    %8d\n' $((sum / ranks))
