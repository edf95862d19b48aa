#!/usr/bin/env bash
# `plait sim train --timeline` against the steps it replays: examples/parallel_lm.py's layouts
# recorded with plait.torch.timeline on the namespace testbed (bench/parallel_lm_testbed.sh),
# each recorded step replayed on the star that models the testbed with a tune file measured
# on it (bench/sim_validate.sh says how), measured and replayed side by side. Needs root.
#
#   bench/train_validate.sh                                   # 4 hosts, 1 Gbit/s, 1 a host
#   HOSTS=2 PER_HOST=2 LAYOUTS="tp-dp pp-tp-dp:1f1b" bench/train_validate.sh
#
# Prints one row per layout: the recorded step of median length, measured (its slowest rank's)
# and replayed, and the replay's compute, exposed communication and bubble (medians over ranks).
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${HOSTS:-4}
PER_HOST=${PER_HOST:-1}
RATE=${RATE:-1gbit}
STEPS=${STEPS:-12}
LAYOUTS=${LAYOUTS:-"ddp fsdp fsdp-noreshard pp:gpipe pp:1f1b pp:interleaved-1f1b pp:zero-bubble pp-dp:1f1b"}
LAB=${LAB:-../shared/peers/netns_lab.sh}
PLAIT=$PWD/build/tools/plait/plait
OUT=$(mktemp -d /tmp/plait-train-validate.XXXXXX)
PORT=$((29700 + RANDOM % 200))

[ "$(id -u)" = 0 ] || { echo "train_validate: needs root (network namespaces)" >&2; exit 1; }

# The testbed's per-message cost: plait tune across two of its hosts, as sim_validate does.
"$LAB" down >/dev/null 2>&1 || true
"$LAB" up "$HOSTS" >/dev/null
"$LAB" shape "$RATE" tbf
tune=$OUT/tune.conf
pids=()
for r in 0 1; do
  ip netns exec "plns$r" env RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
    MASTER_ADDR=192.168.77.1 MASTER_PORT=$PORT PLAIT_HOST_ID="h$r" \
    "$PLAIT" tune --providers tcp --out "$tune" > "$OUT/tune.rank$r" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
"$PLAIT" tune --providers shm --out "$tune" >/dev/null
mtu=$(ip -n plns0 -o link show eth0 | sed -n 's/.* mtu \([0-9]*\) .*/\1/p')
"$LAB" down >/dev/null 2>&1 || true
# netns_lab.sh's TBF: a 512 KB burst at 1 Gbit/s, 8 MB below.
burst=$([ "$RATE" = 1gbit ] && echo 512kb || echo 8mb)
topology="star:hosts=$HOSTS,rate=$RATE,latency=0us,burst=$burst,mtu=$mtu"

TIMELINE=$OUT/tl BACKENDS=plait REPS=1 STEPS=$STEPS HOSTS=$HOSTS PER_HOST=$PER_HOST RATE=$RATE \
  LAYOUTS=$LAYOUTS bench/parallel_lm_testbed.sh > "$OUT/testbed.log" 2>&1 || true

echo "# $HOSTS hosts at $RATE, $PER_HOST rank(s) a host; replayed on $topology with $tune"
echo "| layout | schedule | step | measured (ms) | replayed (ms) | error | compute | exposed | bubble |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for spec in $LAYOUTS; do
  layout=${spec%%:*}
  schedule=$([ "$spec" != "$layout" ] && echo "${spec#*:}" || echo none)
  trace=$OUT/tl/$layout-$schedule-plait-1.json
  if [ ! -f "$trace" ]; then
    echo "| $layout | $schedule | - | run failed ($OUT/testbed.log) | | | | | |"
    continue
  fi
  "$PLAIT" sim train --timeline "$trace" --topology "$topology" --ranks-per-host "$PER_HOST" \
    --tune "$tune" --path 0 > "$OUT/$layout-$schedule.sim"
  awk -v layout="$layout" -v schedule="$schedule" '
    /^plait sim train:/ { for (i = 1; i <= NF; ++i) if ($i == "step") step = $(i + 1) }
    /^compute/ { compute = $3 } /^exposed/ { exposed = $4 } /^bubble/ { bubble = $3 }
    /^measured/ { m = $2; r = $5 }
    END { printf "| %s | %s | %s | %.1f | %.1f | %+.1f %% | %.1f | %.1f | %.1f |\n", layout,
          schedule, step, m, r, (r / m - 1) * 100, compute, exposed, bubble }' "$OUT/$layout-$schedule.sim"
done
echo "(traces, tune file and replays in $OUT)"
