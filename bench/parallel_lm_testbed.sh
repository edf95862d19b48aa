#!/usr/bin/env bash
# examples/parallel_lm.py's layouts on plait and on gloo across network-namespace "hosts", one
# rank a host, every host link capped at RATE both ways (../shared/peers/netns_lab.sh: a
# bridge, TBF on both directions of every link). Needs root.
#
#   bench/parallel_lm_testbed.sh                  # 4 hosts, 1 Gbit/s, 3 reps, every layout
#   HOSTS=4 RATE=1gbit REPS=3 STEPS=20 LAYOUTS="fsdp pp:1f1b" bench/parallel_lm_testbed.sh
#   HOSTS=2 PER_HOST=2 LAYOUTS=tp-dp bench/parallel_lm_testbed.sh   # TP within each host
#   TIMELINE=/tmp/tl bench/parallel_lm_testbed.sh  # plait.torch.timeline: traces, charts,
#                                                  # exposed comm and bubble in the table
#   TIMELINE=/tmp/tl BACKENDS=plait REPS=1 bench/parallel_lm_testbed.sh  # recordings alone
#
# PER_HOST ranks share each host (consecutive ranks: a tensor-parallel group of --tp 2 stays
# on one host and talks over shared memory on plait, loopback tcp on gloo; the data-parallel
# dimension crosses the links).
#
# A layout is LAYOUT or LAYOUT:SCHEDULE (pp, pp-dp). Each runs REPS times, the backends in turn;
# every run trains the same model (--layers 8, so that interleaved schedules have two stages a
# rank on 4 ranks) for STEPS steps. Prints step time and tokens/s, median (min-max) over the
# reps (a rep's figure: its median step, the slowest rank's), the validation loss of each
# backend, and plait's median step over gloo's.
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${HOSTS:-4}
PER_HOST=${PER_HOST:-1}
N=$((HOSTS * PER_HOST))
RATE=${RATE:-1gbit}
REPS=${REPS:-3}
STEPS=${STEPS:-20}
LAYOUTS=${LAYOUTS:-"ddp fsdp fsdp-noreshard pp:gpipe pp:1f1b pp:interleaved-1f1b pp:zero-bubble pp-dp:1f1b"}
EXTRA=${EXTRA:-"--layers 8 --microbatches 8"}
LAB=${LAB:-../shared/peers/netns_lab.sh}
TIMELINE=${TIMELINE:-}
BACKENDS=${BACKENDS:-"plait gloo"}  # plait alone: recordings for plait sim train
PYTHON=$PWD/.venv/bin/python  # not realpath: the venv is its symlink
OUT=$(mktemp -d /tmp/plait-lm-testbed.XXXXXX)
PORT=$((29500 + RANDOM % 200))

[ -z "$TIMELINE" ] || mkdir -p "$TIMELINE"
[ "$(id -u)" = 0 ] || { echo "parallel_lm_testbed: needs root (network namespaces)" >&2; exit 1; }
"$LAB" down >/dev/null 2>&1 || true
"$LAB" up "$HOSTS"
trap '"$LAB" down >/dev/null 2>&1 || true' EXIT
"$LAB" shape "$RATE" tbf

# run NAME LAYOUT SCHEDULE BACKEND: every rank in its namespace; rank 0's RESULT line kept.
run() {
  local name=$1 layout=$2 schedule=$3 backend=$4 pids=() status=0
  PORT=$((PORT + 2))
  for ((r = 0; r < N; r++)); do
    ip netns exec "plns$((r / PER_HOST))" env RANK=$r WORLD_SIZE=$N \
      LOCAL_RANK=$((r % PER_HOST)) LOCAL_WORLD_SIZE=$PER_HOST \
      MASTER_ADDR=192.168.77.1 MASTER_PORT=$PORT GLOO_SOCKET_IFNAME=eth0 \
      PYTHONPATH="$PWD/build/python" "$PYTHON" examples/parallel_lm.py --layout "$layout" \
      ${schedule:+--schedule "$schedule"} --backend "$backend" --steps "$STEPS" $EXTRA \
      ${TIMELINE:+--timeline "$TIMELINE/$name"} \
      > "$OUT/$name.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  if ! grep -h "^RESULT" "$OUT/$name.rank0.log" >> "$OUT/results"; then
    tail -n 20 "$OUT/$name".rank*.log >&2
    echo "parallel_lm_testbed: $name failed (exit $status)" >&2
  fi
}

for spec in $LAYOUTS; do
  layout=${spec%%:*}
  schedule=$([ "$spec" != "$layout" ] && echo "${spec#*:}" || true)
  for rep in $(seq 1 "$REPS"); do
    for backend in $BACKENDS; do
      run "$layout-${schedule:-none}-$backend-$rep" "$layout" "$schedule" "$backend"
    done
  done
done

"$PYTHON" bench/parallel_lm_compare.py --summarize "$OUT/results" \
  --title "$HOSTS hosts, $RATE links, $PER_HOST rank(s) a host"
