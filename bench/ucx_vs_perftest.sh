#!/usr/bin/env bash
# plait's point-to-point over the ucx provider beside UCX's own ucx_perftest (Debian's
# ucx-utils), on the same UCX transports, back to back, REPS alternating repetitions.
#
#   bench/ucx_vs_perftest.sh                       # tcp and sm, 5 repetitions
#   TLS="rc sm" REPS=9 bench/ucx_vs_perftest.sh    # on a host with an RDMA NIC
#
# Each row pairs a ucx_perftest test with plait's measurement of the same thing:
#   two-sided latency   ucp_am_lat (half a round trip)  vs  plait bench rdma --test send_lat
#                       (the transport: plait::rdma::Fabric send/recv; default PLAIT_WAIT=hybrid,
#                       and spin: busy polling, as ucx_perftest) and plait bench pingpong
#                       (the communicator: send/recv calls and Work handles on top)
#   one message's rate  ucp_am_lat at BW_SIZE            vs  send_lat at BW_SIZE
#   write latency       ucp_put_lat (polls memory)       vs  plait bench rdma --test put_lat
#   write rate          ucp_put_bw at 8 B and BW_SIZE    vs  plait bench rdma --test put_bw
# Latencies in microseconds (one way), rates in GB/s (1e9 B/s) or microseconds per write.
# Prints one markdown table: min / median / max over the repetitions, and plait's median over
# ucx_perftest's (for times, above 1 is slower; for GB/s, below 1 is slower).
#
# Both allocate their buffers with UCX (ucx_perftest: ucp_mem_map ALLOCATE; plait bench rdma:
# Fabric::allocate_memory, the same call): on sm, shared memory a put copies into directly.
# MEMORY=user measures plait on memory the program allocated and registered instead, which
# UCX's sm transports reach by software emulation (active messages the target applies).
#
# BIND=none (default, as PLAIT_BIND) pins nothing. Unpinned, the scheduler now and then leaves
# both of plait's ranks on one core for a whole run (their progress threads wake now and
# then; ucx_perftest has none): a context switch per message, 8 B over sm ~2.5 us instead of
# ~0.7, in 3 of 10 runs here; the medians of 5 runs absorb it. BIND=core pins both sides the
# same way: ucx_perftest's server and client to CPUs 0 and 1 (taskset), plait's ranks with
# PLAIT_BIND=core (a rank's progress thread then shares its core: steadier over sm, slower
# over tcp).
set -euo pipefail
cd "$(dirname "$0")/.."
TLS=${TLS:-"tcp sm"}
REPS=${REPS:-5}
LAT_SIZE=${LAT_SIZE:-8}
BW_SIZE=${BW_SIZE:-4194304}
PLAIT=${PLAIT:-build/tools/plait/plait}
MEMORY=${MEMORY:-fabric}
BIND=${BIND:-none}
pin() {  # cpu command... -> the command, pinned to that CPU when BIND=core
  local cpu=$1
  shift
  if [ "$BIND" = core ] && [ "$(nproc)" -gt "$cpu" ]; then taskset -c "$cpu" "$@"; else "$@"; fi
}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing: apt-get install ucx-utils" >&2; exit 2; }
OUT=$(mktemp -d /tmp/plait-ucx-perf.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

# ucx_perftest's "Final:" line: iterations, latency 50%ile / average / overall (us),
# bandwidth average / overall (MB/s), message rate.
perftest() {  # tls test size iters -> the Final line
  local port=$((20000 + RANDOM % 20000))
  UCX_TLS=$1 pin 0 timeout 120 ucx_perftest -p "$port" -t "$2" -s "$3" -n "$4" >/dev/null 2>&1 &
  local server=$!
  sleep 0.3
  UCX_TLS=$1 pin 1 timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$2" -s "$3" -n "$4" 2>/dev/null |
    awk '/^Final:/ {print}'
  wait "$server" || true
}

plait_json() {  # tls size field args... -> the field of the one JSON record
  local tls=$1 size=$2 field=$3 json="$OUT/p.json"
  shift 3
  PLAIT_BIND=$BIND PLAIT_TRANSPORT=ucx PLAIT_UCX_TLS=$tls "$PLAIT" bench -n 2 "$@" --min "$size" --max "$size" \
    --json "$json" >/dev/null
  sed -E "s/.*\"$field\": *([0-9.eE+-]+).*/\\1/" "$json"
}

record() { [ -n "$3" ] && echo "$1 $2 $3" >>"$OUT/all" || true; }  # tls key value (none: that run failed)

for rep in $(seq 1 "$REPS"); do
  for tls in $TLS; do
    record "$tls" pt_lat "$(perftest "$tls" ucp_am_lat "$LAT_SIZE" 20000 | awk '{print $5}')"
    record "$tls" pl_lat "$(plait_json "$tls" "$LAT_SIZE" time_us rdma --test send_lat)"
    record "$tls" pl_lat_spin "$(PLAIT_WAIT=spin plait_json "$tls" "$LAT_SIZE" time_us rdma --test send_lat)"
    record "$tls" pp_lat "$(plait_json "$tls" "$LAT_SIZE" time_us pingpong | awk '{print $1 / 2}')"
    record "$tls" pt_bw "$(perftest "$tls" ucp_am_lat "$BW_SIZE" 200 | awk -v n="$BW_SIZE" '{print n / $5 / 1000}')"
    record "$tls" pl_bw "$(plait_json "$tls" "$BW_SIZE" gbps rdma --test send_lat)"
    record "$tls" pt_put_lat "$(perftest "$tls" ucp_put_lat "$LAT_SIZE" 20000 | awk '{print $5}')"
    record "$tls" pl_put_lat "$(plait_json "$tls" "$LAT_SIZE" time_us rdma --test put_lat --memory "$MEMORY")"
    record "$tls" pt_put_rate "$(perftest "$tls" ucp_put_bw "$LAT_SIZE" 20000 | awk '{print $5}')"
    record "$tls" pl_put_rate "$(plait_json "$tls" "$LAT_SIZE" time_us rdma --test put_bw --memory "$MEMORY")"
    record "$tls" pt_put_bw "$(perftest "$tls" ucp_put_bw "$BW_SIZE" 200 | awk '{print $7 / 1000}')"
    record "$tls" pl_put_bw "$(plait_json "$tls" "$BW_SIZE" gbps rdma --test put_bw --memory "$MEMORY")"
  done
done

values() { awk -v t="$1" -v k="$2" '$1 == t && $2 == k {print $3}' "$OUT/all" | sort -g; }
stats() {  # tls key -> "min / median / max"
  values "$1" "$2" | awk '{v[NR] = $1} END {if (NR == 0) {print "-"; exit}
         printf "%.2f / %.2f / %.2f", v[1], v[int((NR + 1) / 2)], v[NR]}'
}
median() { values "$1" "$2" | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }
ratio() {  # tls plait_key perftest_key
  awk -v a="$(median "$1" "$2")" -v b="$(median "$1" "$3")" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}'
}
row() {  # tls what perftest_key plait_key
  echo "| $1 | $2 | $(stats "$1" "$3") | $(stats "$1" "$4") | $(ratio "$1" "$4" "$3") |"
}

echo "| UCX transport | measure | ucx_perftest | plait | plait / perftest (medians) |"
echo "|---|---|---:|---:|---:|"
for tls in $TLS; do
  row "$tls" "two-sided latency $LAT_SIZE B (us): ucp_am_lat / rdma send_lat" pt_lat pl_lat
  row "$tls" "the same, PLAIT_WAIT=spin (busy polling, as ucx_perftest)" pt_lat pl_lat_spin
  row "$tls" "two-sided latency $LAT_SIZE B (us): ucp_am_lat / communicator pingpong" pt_lat pp_lat
  row "$tls" "one message of $BW_SIZE B (GB/s): ucp_am_lat / rdma send_lat" pt_bw pl_bw
  row "$tls" "write latency $LAT_SIZE B (us): ucp_put_lat / rdma put_lat" pt_put_lat pl_put_lat
  row "$tls" "writes of $LAT_SIZE B (us each): ucp_put_bw / rdma put_bw" pt_put_rate pl_put_rate
  row "$tls" "writes of $BW_SIZE B (GB/s): ucp_put_bw / rdma put_bw" pt_put_bw pl_put_bw
done
echo
echo "($REPS alternating runs, min / median / max; BIND=$BIND; $(date -u +%F), $(nproc) cores)"
