#!/usr/bin/env bash
# System calls per collective call in steady state, counted by the kernel's syscall
# tracepoints (perf stat, all processes and threads of the job, no ptrace slow-down).
#
#   bench/syscalls_per_op.sh [-n RANKS] [--op allreduce] [--bytes 8] [--runs 3] [-- bench args]
#
# Two jobs run the same call, N1 and N2 times; setup and teardown cost the same in both, so
# (count(N2) - count(N1)) / (N2 - N1) is what one more call costs, summed over all ranks.
# Prints one line per counted syscall (and the total), min / median / max over --runs.
# Needs perf (Debian's linux-perf) and tracepoint access (root, or perf_event_paranoid <= -1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
plait=${PLAIT_BIN:-$here/../build/tools/plait/plait}
ranks=2 op=allreduce bytes=8 runs=3 n1=10000 n2=110000
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n) ranks=$2; shift ;;
    --op) op=$2; shift ;;
    --bytes) bytes=$2; shift ;;
    --runs) runs=$2; shift ;;
    --calls) n2=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [-n RANKS] [--op OP] [--bytes B] [--runs R] [--calls N] [-- bench args]" >&2; exit 2 ;;
  esac
  shift
done
command -v perf >/dev/null || { echo "error: perf not found (apt-get install linux-perf)" >&2; exit 1; }
[ -x "$plait" ] || { echo "error: $plait not built (make build)" >&2; exit 1; }

events=(raw_syscalls:sys_enter syscalls:sys_enter_futex syscalls:sys_enter_sched_yield
        syscalls:sys_enter_poll syscalls:sys_enter_ppoll syscalls:sys_enter_epoll_wait
        syscalls:sys_enter_process_vm_readv syscalls:sys_enter_process_vm_writev
        syscalls:sys_enter_sendmsg syscalls:sys_enter_recvmsg syscalls:sys_enter_read
        syscalls:sys_enter_write)
evlist=$(IFS=,; echo "${events[*]}")

# count EVENT -> value, for one job of N calls
count_job() {
  local calls=$1
  perf stat -x, -e "$evlist" -- "$plait" bench -n "$ranks" "$op" --min "$bytes" --max "$bytes" \
    --iters "$calls" --warmup 50 "${extra[@]}" 2>&1 >/dev/null | awk -F, '$3 ~ /sys_enter/ { print $3, $1 }'
}

declare -A per_op
for ((r = 0; r < runs; r++)); do
  declare -A a=() b=()
  while read -r ev v; do a[$ev]=$v; done < <(count_job "$n1")
  while read -r ev v; do b[$ev]=$v; done < <(count_job "$n2")
  for ev in "${events[@]}"; do
    per_op[$ev]+="$(awk -v x="${a[$ev]:-0}" -v y="${b[$ev]:-0}" -v d=$((n2 - n1)) \
      'BEGIN { printf "%.4f ", (y - x) / d }')"
  done
done

echo "# $op $bytes B, $ranks ranks: syscalls per call (all ranks together), min / median / max over $runs runs"
printf '%-40s %10s %10s %10s\n' syscall min median max
for ev in "${events[@]}"; do
  name=${ev#*:}; name=${name#sys_enter_}; [ "$name" = sys_enter ] && name=total
  # shellcheck disable=SC2086
  printf '%-40s %10s %10s %10s\n' "$name" $(echo ${per_op[$ev]} | tr ' ' '\n' | sort -g |
    awk '{ v[NR] = $1 } END { printf "%.3f %.3f %.3f", v[1], v[int((NR + 1) / 2)], v[NR] }')
done
