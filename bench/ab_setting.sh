#!/usr/bin/env bash
# The cost of one setting, A against B, in one run: `plait bench` alternates between the two
# values REPS times (so that a noisy machine treats both alike) and the table gives each
# size's time min / median / max per value and the ratio of the medians.
#
#   bench/ab_setting.sh PLAIT_TCP_INTEGRITY "0 1" -n 2 allreduce --min 1M --max 64M --factor 64
#   bench/ab_setting.sh PLAIT_KEEPALIVE "0 1000" -n 2 allreduce --min 8 --max 64K --factor 8
#
# Environment: BUILD (default build), REPS (default 5); other PLAIT_* variables (such as
# PLAIT_TRANSPORT=tcp) pass through to the ranks.
set -euo pipefail
var=$1
values=$2
shift 2
build=${BUILD:-build}
reps=${REPS:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((rep = 0; rep < reps; rep++)); do
  for value in $values; do
    env "$var=$value" "$build/tools/plait/plait" bench "$@" --json "$out/$value.$rep.json" >/dev/null
  done
done
python3 - "$out" "$var" $values <<'PY'
import glob, json, statistics, sys
out, var, values = sys.argv[1], sys.argv[2], sys.argv[3:]
times = {}  # (value, bytes) -> [us]
for value in values:
    for path in glob.glob(f"{out}/{value}.*.json"):
        for line in open(path):
            r = json.loads(line)
            times.setdefault((value, r["bytes"]), []).append(r["time_us"])
sizes = sorted({b for (_, b) in times})
head = f"{'bytes':>10}" + "".join(f"  {var + '=' + v:>30}" for v in values) + "   ratio"
print(f"# {var}: time per call in us, min / median / max of {len(times[(values[0], sizes[0])])} runs")
print(head)
for b in sizes:
    cells, medians = [], []
    for v in values:
        t = sorted(times[(v, b)])
        medians.append(statistics.median(t))
        cells.append(f"{t[0]:9.1f} / {medians[-1]:9.1f} / {t[-1]:9.1f}")
    print(f"{b:>10}" + "".join(f"  {c:>30}" for c in cells) + f"   {medians[-1] / medians[0]:5.2f}")
PY
