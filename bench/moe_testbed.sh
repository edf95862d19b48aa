#!/usr/bin/env bash
# MoE dispatch + combine (bench/moe_compare.py) on plait and on gloo across network-namespace
# "hosts", one rank a host, every host link capped at RATE both ways
# (../shared/peers/netns_lab.sh: a bridge, TBF on both directions of every link). Needs root.
#
#   bench/moe_testbed.sh                              # 4 hosts, 1 Gbit/s, 3 reps, 128 and 4096 tokens
#   HOSTS=4 RATE=1gbit REPS=3 TOKENS=128,4096 ARGS="--skew zipf:1.2" bench/moe_testbed.sh
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${HOSTS:-4}
RATE=${RATE:-1gbit}
REPS=${REPS:-3}
TOKENS=${TOKENS:-128,4096}
ARGS=${ARGS:-}
LAB=${LAB:-../shared/peers/netns_lab.sh}
PYTHON=$PWD/.venv/bin/python
OUT=$(mktemp -d /tmp/plait-moe-testbed.XXXXXX)
PORT=$((29700 + RANDOM % 200))

[ "$(id -u)" = 0 ] || { echo "moe_testbed: needs root (network namespaces)" >&2; exit 1; }
"$LAB" down >/dev/null 2>&1 || true
"$LAB" up "$HOSTS"
trap '"$LAB" down >/dev/null 2>&1 || true' EXIT
"$LAB" shape "$RATE" tbf

# run BACKEND REP: every rank in its namespace; rank 0's RESULT lines kept.
run() {
  local backend=$1 rep=$2 pids=() status=0
  PORT=$((PORT + 2))
  for ((r = 0; r < HOSTS; r++)); do
    ip netns exec "plns$r" env RANK=$r WORLD_SIZE=$HOSTS LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
      MASTER_ADDR=192.168.77.1 MASTER_PORT=$PORT GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
      PYTHONPATH="$PWD/build/python" "$PYTHON" bench/moe_compare.py --rank --backend "$backend" \
      --tokens "$TOKENS" $ARGS > "$OUT/$backend-$rep.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  if ! grep -h "^RESULT" "$OUT/$backend-$rep.rank0.log" >> "$OUT/results"; then
    tail -n 20 "$OUT/$backend-$rep".rank*.log >&2
    echo "moe_testbed: $backend rep $rep failed (exit $status)" >&2
  fi
}

for rep in $(seq 1 "$REPS"); do
  for backend in plait gloo; do run "$backend" "$rep"; done
done
"$PYTHON" bench/moe_compare.py --summarize "$OUT/results" --title "$HOSTS hosts, $RATE links"
