#!/usr/bin/env bash
# plait's point-to-point over the ucx provider beside UCX's own ucx_perftest (Debian's
# ucx-utils), on the same UCX transports, back to back, REPS alternating repetitions.
#
#   bench/ucx_vs_perftest.sh                       # tcp and sm, 5 repetitions
#   TLS="rc sm" REPS=9 bench/ucx_vs_perftest.sh    # on a host with an RDMA NIC
#
# Latency: one-way, in microseconds: ucx_perftest ucp_am_lat's overall average (half a round
# trip), plait bench pingpong's round trip / 2. Bandwidth, in GB/s (1e9 B/s) at BW_SIZE, one
# message at a time both: size / one-way time of ucx_perftest ucp_am_lat and of plait's
# pingpong; and ucx_perftest ucp_am_bw (a stream of messages in flight) for reference.
# Prints one markdown table: min / median / max over the repetitions.
set -euo pipefail
cd "$(dirname "$0")/.."
TLS=${TLS:-"tcp sm"}
REPS=${REPS:-5}
LAT_SIZE=${LAT_SIZE:-8}
BW_SIZE=${BW_SIZE:-4194304}
PLAIT=${PLAIT:-build/tools/plait/plait}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing: apt-get install ucx-utils" >&2; exit 2; }
OUT=$(mktemp -d /tmp/plait-ucx-perf.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

# ucx_perftest's "Final:" line: iterations, latency 50%ile / average / overall (us),
# bandwidth average / overall (MB/s), message rate.
perftest() {  # tls test size iters -> the Final line
  local port=$((20000 + RANDOM % 20000))
  UCX_TLS=$1 timeout 120 ucx_perftest -p "$port" -t "$2" -s "$3" -n "$4" >/dev/null 2>&1 &
  local server=$!
  sleep 0.3
  UCX_TLS=$1 timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$2" -s "$3" -n "$4" 2>/dev/null |
    awk '/^Final:/ {print}'
  wait "$server" || true
}

plait_rtt_us() {  # tls size -> the round trip in us
  local json="$OUT/p.json"
  PLAIT_TRANSPORT=ucx PLAIT_UCX_TLS=$1 "$PLAIT" bench -n 2 pingpong --min "$2" --max "$2" \
    --json "$json" >/dev/null
  sed -E 's/.*"time_us": *([0-9.eE+-]+).*/\1/' "$json"
}

for rep in $(seq 1 "$REPS"); do
  for tls in $TLS; do
    perftest "$tls" ucp_am_lat "$LAT_SIZE" 20000 | awk -v t="$tls" '{print t, "perftest_lat", $5}' >>"$OUT/all"
    perftest "$tls" ucp_am_lat "$BW_SIZE" 200 |
      awk -v t="$tls" -v n="$BW_SIZE" '{print t, "perftest_bw", n / $5 / 1000}' >>"$OUT/all"
    perftest "$tls" ucp_am_bw "$BW_SIZE" 200 | awk -v t="$tls" '{print t, "perftest_stream", $7 / 1000}' >>"$OUT/all"
    echo "$tls plait_lat $(plait_rtt_us "$tls" "$LAT_SIZE" | awk '{print $1 / 2}')" >>"$OUT/all"
    echo "$tls plait_bw $(plait_rtt_us "$tls" "$BW_SIZE" | awk -v n="$BW_SIZE" '{print n / ($1 / 2) / 1000}')" >>"$OUT/all"
  done
done

stats() {  # tls key -> "min / median / max"
  awk -v t="$1" -v k="$2" '$1 == t && $2 == k {print $3}' "$OUT/all" | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) {print "-"; exit}
         printf "%.2f / %.2f / %.2f", v[1], v[int((NR + 1) / 2)], v[NR]}'
}

echo "| UCX transport | ucx_perftest ucp_am_lat $LAT_SIZE B (us) | plait pingpong / 2 (us) | ucp_am_lat $BW_SIZE B (GB/s) | plait pingpong $BW_SIZE B (GB/s) | ucp_am_bw stream (GB/s) |"
echo "|---|---:|---:|---:|---:|---:|"
for tls in $TLS; do
  echo "| $tls | $(stats "$tls" perftest_lat) | $(stats "$tls" plait_lat) | $(stats "$tls" perftest_bw) | $(stats "$tls" plait_bw) | $(stats "$tls" perftest_stream) |"
done
echo
echo "($REPS alternating runs, min / median / max; $(date -u +%F), $(nproc) cores)"
