#!/usr/bin/env bash
# Projections with plait sim train: bench/layouts/gpt-39b.json (examples/parallel_lm.py's
# model family, pre-LN GPT blocks over bytes, at width 8192 and 48 blocks, 2,048 sequences of
# 2,048 bytes a step) at 1,024, 4,096 and 16,384 ranks, 8 a host, on a fat tree and a
# dragonfly with 1.6 Tbit/s host links (8 x 200G NICs), NVLink-class hosts (--intra-rate
# 28800gbit) and GPU reductions (--reduce-rate 8000gbit): tp 8 within each host, every pp of
# PPS and schedule of SCHEDULES that fits 80 GB a rank, fastest first per scale and topology,
# replayed through one pipeline (--replay pipeline: the slowest copy where copies' paths
# differ), gradients in CHUNK pieces. Records go to OUT.json, the chart to OUT.png.
#
#   bench/train_projection.sh                            # ~1 hour on 2 cores
#   RANKS="1024 4096" PPS=4,8 bench/train_projection.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PLAIT=$(realpath "${PLAIT:-build/tools/plait/plait}")
RANKS=${RANKS:-"1024 4096 16384"}
PPS=${PPS:-4,8,16}
CHUNK=${CHUNK:-1M}
SCHEDULES=${SCHEDULES:-1f1b,interleaved-1f1b}
LINK=${LINK:-"rate=1600gbit,latency=1us"}
OUT=${OUT:-/tmp/plait-train-projection}
declare -A FATTREE=([1024]="fattree:k=8" [4096]="fattree:k=14" [16384]="fattree:k=22")
declare -A DRAGONFLY=([1024]="dragonfly:a=4,p=4,h=2" [4096]="dragonfly:a=8,p=4,h=2"
                      [16384]="dragonfly:a=8,p=8,h=4")
: > "$OUT.json"
for ranks in $RANKS; do
  for topology in "${FATTREE[$ranks]}" "${DRAGONFLY[$ranks]}"; do
    echo "=== $ranks ranks on $topology,$LINK"
    "$PLAIT" sim train --layout bench/layouts/gpt-39b.json --sweep --ranks "$ranks" \
      --topology "$topology,$LINK" --ranks-per-host 8 --intra-rate 28800gbit \
      --reduce-rate 8000gbit --tp 8 --pp "$PPS" --schedules "$SCHEDULES" --json "$OUT.json" \
      --replay pipeline --chunk "$CHUNK"
  done
done
.venv/bin/python bench/plot_train_projection.py "$OUT.json" "$OUT.png"
echo "records: $OUT.json, chart: $OUT.png"
