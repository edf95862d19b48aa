#!/usr/bin/env bash
# `plait bench compress` REPS times at one size; per method the median (min-max) over the runs
# of each column, as docs/benchmarks.md's table.
#
#   bench/compress_table.sh                 # 64 MiB, 5 runs
#   SIZE=16M REPS=3 bench/compress_table.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${SIZE:-64M}
REPS=${REPS:-5}
PLAIT=${PLAIT:-build/tools/plait/plait}
OUT=$(mktemp -d /tmp/plait-compress.XXXXXX)
for rep in $(seq 1 "$REPS"); do
  "$PLAIT" bench compress --min "$SIZE" --max "$SIZE" --json "$OUT/run$rep.json" > /dev/null
done
python3 - "$OUT" "$REPS" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
rows = {}
for rep in range(1, reps + 1):
    for line in open(f"{out}/run{rep}.json"):
        r = json.loads(line)
        rows.setdefault(r["method"], []).append(r)
def cell(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"
print(f"| method | wire bytes | ratio | compress | with feedback | decompress | round trip |")
print("|---|---:|---:|---:|---:|---:|---:|")
for method, rs in rows.items():
    size = rs[0]["bytes"]
    wire = rs[0]["wire_bytes"]
    print(f"| {method} | {wire} | {size / wire:.1f}x | " + " | ".join(
        cell([r[k] for r in rs]) for k in ("compress_gbps", "compress_feedback_gbps", "decompress_gbps", "round_trip_gbps")) + " |")
print(f"# GB/s of f32 input on one core, {reps} runs of plait bench compress at {rs[0]['bytes']} bytes: median (min-max)")
PY
