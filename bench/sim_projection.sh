#!/usr/bin/env bash
# Projection tables with plait sim: ring, halving-doubling, double binary tree and hierarchical
# allreduce at 1,024 / 4,096 / 16,384 ranks (8 per host) on a fat tree and a dragonfly, 1 MiB
# to 1 GiB. Prints one markdown table per topology family (busbw GB/s; "-" where the replay
# was refused or took longer than LIMIT seconds, with the reason below the table) and writes
# the records to OUT.json for a plot. Symmetric calls are replayed through host 0's ranks
# (--replay symmetric: on a fat tree hashing flows, the slowest copy, an upper bound); the
# pipelined hierarchical allreduce through the first rank of each host (its copies on the
# host's other ranks beside each message; the slowest copy where ECMP hashes them apart);
# trees in full; each within LIMIT seconds (the hierarchical allreduce of 1 GiB on 16,384
# ranks takes ~100 s).
#
# Each size is cut into chunks of max(1 MiB, bytes / 64) (PLAIT_CHUNK_BYTES, 1 MiB by default,
# is what one raises for gigabyte buffers: 1,024 chunks of a 1 GiB call add nothing to its
# pipelining but replay steps).
#
#   bench/sim_projection.sh                      # ~10 minutes on 2 cores
#   LIMIT=60 SIZES="1M 16M 256M 1G" bench/sim_projection.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PLAIT=$(realpath "${PLAIT:-build/tools/plait/plait}")
LIMIT=${LIMIT:-180}
SIZES=${SIZES:-"1M 32M 1G"}
RPH=${RPH:-8}
LINK=${LINK:-"rate=25gbit,latency=1us"}
OUT=${OUT:-/tmp/plait-sim-projection}
ALGOS="ring halving_doubling double_binary_tree hierarchical"
# Hosts for 1k / 4k / 16k ranks at 8 per host: 128, 512, 2048.
declare -A FATTREE=([1024]="fattree:k=8" [4096]="fattree:k=14" [16384]="fattree:k=22")
declare -A DRAGONFLY=([1024]="dragonfly:a=4,p=4,h=2" [4096]="dragonfly:a=8,p=4,h=2"
                      [16384]="dragonfly:a=8,p=8,h=4")
: > "$OUT.json"
notes=()
for family in FATTREE DRAGONFLY; do
  declare -n specs=$family
  echo
  echo "| ${family,,} | ranks | bytes | ring | halving_doubling | double_binary_tree | hierarchical | fastest | sim (s) |"
  echo "|---|---:|---:|---:|---:|---:|---:|---|---:|"
  for ranks in 1024 4096 16384; do
    topology="${specs[$ranks]},$LINK"
    for size in $SIZES; do
      row="| \`$topology\` | $ranks | $size |"
      best="" best_time="" spent=0
      chunk=$(numfmt --from=iec "$size")
      chunk=$(( chunk / 64 > 1048576 ? chunk / 64 : 1048576 ))
      for algo in $ALGOS; do
        start=$(date +%s.%N)
        if out=$(timeout "$LIMIT" "$PLAIT" sim allreduce --topology "$topology" --ranks "$ranks" \
                   --ranks-per-host "$RPH" --bytes "$size" --chunk "$chunk" --algo "$algo" --replay symmetric \
                   --json /dev/stdout 2>&1); then
          record=$(grep '^{' <<<"$out" | head -1)
          echo "$record" >> "$OUT.json"
          busbw=$(sed -n 's/.*"busbw_GBps": \([0-9.e+-]*\).*/\1/p' <<<"$record")
          time_us=$(sed -n 's/.*"time_us": \([0-9.e+-]*\).*/\1/p' <<<"$record")
          row="$row $(printf '%.3f' "$busbw") |"
          if [ -z "$best_time" ] || awk -v a="$time_us" -v b="$best_time" 'BEGIN { exit !(a < b) }'; then
            best=$algo best_time=$time_us
          fi
        else
          row="$row - |"
          why=$(grep -o 'plait sim: .*' <<<"$out" | head -1 | cut -c1-160 || true)
          notes+=("$ranks ranks, $size, $algo on ${specs[$ranks]}: ${why:-more than $LIMIT s}")
        fi
        spent=$(awk -v s="$spent" -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print s + b - a }')
      done
      printf '%s %s | %.0f |\n' "$row" "${best:--}" "$spent"
    done
  done
done
echo
for n in "${notes[@]}"; do echo "- not simulated: $n"; done
echo
echo "records: $OUT.json"
# A picture per family: busbw against bytes, a panel per rank count.
for family in fattree dragonfly; do
  grep "\"topology\": \"$family" "$OUT.json" > "$OUT-$family.json" || continue
  "$PLAIT" sim plot "$OUT-$family.json" --out "$OUT-$family.png" \
    --title "plait sim: allreduce on a $family, $RPH ranks per host, $LINK" || true
done
