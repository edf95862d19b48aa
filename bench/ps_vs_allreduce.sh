#!/usr/bin/env bash
# The parameter server's push_pull against plait's allreduce on this host, at the same bytes
# and the same workers: W ranks allreduce, or W workers push_pull with K extra server ranks.
# Every job back to back, REPS repetitions; the slowest rank's time per call, median
# (min-max), and beside it the bandwidth term of each cost model with the beta that
# `plait bench ps` measures (a one-sided write between two ranks):
#   allreduce (ring)   2(W-1)/W * n / beta
#   push_pull          what `plait bench ps` prints as its ideal: max(n/beta, W*n/(K*beta)) per
#                      direction, both directions at once (links); when the ranks outnumber the
#                      host's cores, the larger cores' bound (every byte copied at beta and every
#                      pushed byte summed at gamma, over the cores)
#
#   bench/ps_vs_allreduce.sh                          # W=2, K=1 and 2, 1M..64M, 3 reps
#   W=4 KS="2 4" SIZES="16777216" REPS=5 bench/ps_vs_allreduce.sh
set -euo pipefail
cd "$(dirname "$0")/.."
W=${W:-2}
KS=${KS:-"1 2"}
SIZES=${SIZES:-"1048576 16777216 67108864"}
REPS=${REPS:-3}
PLAIT=${PLAIT:-build/tools/plait/plait}
OUT=$(mktemp -d /tmp/plait-ps-vs-ar.XXXXXX)

for rep in $(seq 1 "$REPS"); do
  for size in $SIZES; do
    "$PLAIT" bench -n "$W" allreduce --min "$size" --max "$size" --check > "$OUT/ar-$size-$rep.log"
    for k in $KS; do
      "$PLAIT" bench -n $((W + k)) ps --servers "$k" --min "$size" --max "$size" --check \
        > "$OUT/ps$k-$size-$rep.log"
    done
  done
done

python3 - "$OUT" "$W" "$KS" "$SIZES" "$REPS" <<'PY'
import re, statistics, sys
out, w, ks, sizes, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), int(sys.argv[5])

def ar(size, rep):
    text = open(f"{out}/ar-{size}-{rep}.log").read()
    m = re.search(r"^\S*\s+(\d+)\s+\d+\s+f32\s+sum\s+\S+\s+-?\d+\s+([\d.]+)", text, re.M)
    return float(m.group(2))

def ps(k, size, rep):
    text = open(f"{out}/ps{k}-{size}-{rep}.log").read()
    beta = float(re.search(r"beta \(one-sided write[^)]*\): ([\d.]+) GB/s", text).group(1))
    m = re.search(r"^\S*\s+(\d+)\s+\d+\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+\d+%\s+([\d.]+)", text, re.M)
    return float(m.group(2)), float(m.group(3)), beta

def cell(values):
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"

head = ["bytes", f"allreduce np={w}", "model"]
for k in ks:
    head += [f"push_pull {w}w+{k}s", "model"]
print("| " + " | ".join(head) + " |")
print("|" + "---:|" * len(head))
for size in sizes:
    n = int(size)
    ars = [ar(size, r) for r in range(1, reps + 1)]
    runs = {k: [ps(k, size, r) for r in range(1, reps + 1)] for k in ks}
    beta = statistics.median(b for k in ks for _, _, b in runs[k]) * 1e3  # bytes per us
    row = [size, cell(ars), f"{2 * (w - 1) / w * n / beta:.1f}"]
    for k in ks:
        row += [cell([t for t, _, _ in runs[k]]), f"{statistics.median(i for _, i, _ in runs[k]):.1f}"]
    print("| " + " | ".join(row) + " |")
print(f"# us per call; model: the bandwidth term with beta = {beta / 1e3:.2f} GB/s (median of the ps runs' probes), the push_pull's as plait bench ps prints it")
PY
