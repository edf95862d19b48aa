#!/usr/bin/env bash
# The shuffle on HOSTS network-namespace "hosts" (one rank each) whose links are capped at RATE
# (TBF both ways, as bench/sim_validate.sh shapes them), against the links' bound: `plait sort
# run` in memory, pull and push alternated, REPS times each; its shuffle phase (every rank has
# mapped when it starts: the exchange alone) beside the time the busiest link needs for what
# crosses it. Needs root.
#
#   bench/shuffle_testbed.sh                       # 4 hosts, 1gbit, 2 GB of records, 3 reps
#   HOSTS=4 RATE=1gbit RECORDS=20m MODES="pull push" REPS=3 bench/shuffle_testbed.sh
#
# The bound: each host sends (n-1)/n of its records and receives as much; the busiest rank's
# bytes (the larger of what it sent and received, sort run's shuffle_link_bytes) over the
# link's payload rate, RATE x 1448/1514 (a full TCP segment of a 1500-byte MTU and its
# Ethernet, IP and TCP headers). The records are generated once into DIR (default a temporary
# directory; the input stays in the page cache) and every output is validated.
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${HOSTS:-4}
RATE=${RATE:-1gbit}
RECORDS=${RECORDS:-20m}
MODES=${MODES:-"pull push"}
REPS=${REPS:-3}
TCP_CC=${TCP_CC-reno}  # as sim_validate.sh: BBR holds its rate under a TBF after a burst
LAB=${LAB:-../shared/peers/netns_lab.sh}
PLAIT=$(realpath "${PLAIT:-build/tools/plait/plait}")
DIR=${DIR:-$(mktemp -d /tmp/plait-shuffle-testbed.XXXXXX)}
mkdir -p "$DIR"
PORT=$((33000 + RANDOM % 500))

[ "$(id -u)" = 0 ] || { echo "shuffle_testbed: needs root (network namespaces)" >&2; exit 1; }
"$LAB" down >/dev/null 2>&1 || true
trap '"$LAB" down >/dev/null 2>&1 || true' EXIT

case $RATE in
  *gbit) bits=$(( ${RATE%gbit} * 1000000000 )) ;;
  *mbit) bits=$(( ${RATE%mbit} * 1000000 )) ;;
  *) echo "shuffle_testbed: RATE takes NNmbit or NNgbit, not $RATE" >&2; exit 2 ;;
esac
# TBF burst: the rate's bytes per timer tick (HZ 250), rounded up to a power of two kilobytes.
kb=$(( (bits / 8 / 250 + 1023) / 1024 )) burst=1
while [ "$burst" -lt "$kb" ]; do burst=$((burst * 2)); done

"$LAB" up "$HOSTS" >/dev/null
for ((i = 0; i < HOSTS; i++)); do
  for target in "plns$i eth0" "plbr vbr$i"; do
    set -- $target
    tc -n "$1" qdisc add dev "$2" root tbf rate "$RATE" burst "${burst}kb" limit 4mb
  done
  [ -n "$TCP_CC" ] && ip netns exec "plns$i" sysctl -qw net.ipv4.tcp_congestion_control="$TCP_CC"
done

# job ARGS...: one rank in each namespace host; fails when a rank does.
job() {
  local pids=() r status=0
  PORT=$((PORT + 2))
  for ((r = 0; r < HOSTS; r++)); do
    ip netns exec "plns$r" env RANK=$r WORLD_SIZE=$HOSTS LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
      MASTER_ADDR=192.168.77.1 MASTER_PORT=$PORT PLAIT_HOST_ID="h$r" PLAIT_PROGRESS=0 \
      PLAIT_CONNECT_TIMEOUT=60000 PLAIT_TIMEOUT=600000 "$PLAIT" "$@" > "$DIR/log.rank$r" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  if [ "$status" != 0 ]; then
    cat "$DIR"/log.rank* >&2
    echo "shuffle_testbed: job failed: $*" >&2
    return 1
  fi
}

[ -d "$DIR/in" ] || job sort gen --records "$RECORDS" --out "$DIR/in"
echo "$HOSTS hosts, links $RATE (TBF both ways, $TCP_CC), $RECORDS records, $(date -u +%F)"
echo
echo "| mode | rep | shuffle (s) | link bound (s) | shuffle / bound | whole sort (s) | output |"
echo "|---|---:|---:|---:|---:|---:|---|"
for ((rep = 1; rep <= REPS; rep++)); do
  for mode in $MODES; do
    rm -rf "$DIR/out"
    job sort run --in "$DIR/in" --out "$DIR/out" --mode "$mode" --json "$DIR/sort.json"
    valid=$("$PLAIT" sort validate "$DIR/out" --expect "$DIR/in" >/dev/null 2>&1 && echo valid || echo INVALID)
    python3 - "$DIR/sort.json" "$bits" "$mode" "$rep" "$valid" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
payload_rate = int(sys.argv[2]) / 8 * 1448 / 1514  # bytes/s of TCP payload
bound = j["shuffle_link_bytes"] / payload_rate
s = j["phases"]["shuffle"]
print(f"| {sys.argv[3]} | {sys.argv[4]} | {s:.3f} | {bound:.3f} | {s / bound:.3f} | {j['seconds']:.3f} | {sys.argv[5]} |")
EOF
  done
done
