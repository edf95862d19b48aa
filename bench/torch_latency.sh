#!/usr/bin/env bash
# What torch.distributed adds to a plait allreduce: the bare call (`plait bench`) beside
# `torch.distributed.all_reduce` on the "plait" backend (bench/torch_sweep.py), and gloo's,
# each run --runs times; prints min / median / max over the runs of each run's time per call.
#
#   bench/torch_latency.sh [-n 2] [--runs 5] [--sizes "8 8K 1M"] [--iters 5000]
#                          [--build DIR] [--no-gloo]
#
# The bare time is plait bench's mean per call; the torch times are torch_sweep.py's median
# over iterations of the slowest rank's time. --build names a build directory (default
# build/): DIR/tools/plait/plait and DIR/python are used, so two builds measured in one
# session (e.g. before and after a change) share the machine's state. Runs alternate
# between the three kinds so that a noisy minute spreads over all of them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-.venv/bin/python}"
ranks=2 runs=5 sizes="8 8K 1M" iters=5000 build="$ROOT/build" gloo=1
while [ $# -gt 0 ]; do
  case "$1" in
    -n) ranks=$2; shift ;;
    --runs) runs=$2; shift ;;
    --sizes) sizes=$2; shift ;;
    --iters) iters=$2; shift ;;
    --build) build=$(cd "$2" && pwd); shift ;;
    --no-gloo) gloo=0 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "torch_latency.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
plait="$build/tools/plait/plait"
[ -x "$plait" ] || { echo "torch_latency.sh: $plait not built" >&2; exit 1; }
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bytes() {  # 8 -> 8, 8K -> 8192, 1M -> 1048576
  case "$1" in
    *[Kk]) echo $((${1%?} << 10)) ;;
    *[Mm]) echo $((${1%?} << 20)) ;;
    *) echo "$1" ;;
  esac
}
list=()
for s in $sizes; do list+=("$(bytes "$s")"); done

for ((r = 0; r < runs; r++)); do
  for b in "${list[@]}"; do
    "$plait" bench -n "$ranks" allreduce --min "$b" --max "$b" --iters "$iters" \
      --json "$work/bare.$r.$b.json" >/dev/null 2>&1 || { echo "torch_latency.sh: plait bench failed" >&2; exit 1; }
  done
  backends=(plait)
  [ "$gloo" = 1 ] && backends+=(gloo)
  for be in "${backends[@]}"; do
    for b in "${list[@]}"; do
      "$plait" run -n "$ranks" -- "$PYTHON" "$ROOT/bench/torch_sweep.py" --backend "$be" \
        --min "$b" --max "$b" --iters "$iters" --no-check --json "$work/$be.$r.$b.json" \
        >"$work/$be.log" 2>&1 || { echo "torch_latency.sh: torch_sweep.py ($be) failed:" >&2; tail -5 "$work/$be.log" >&2; exit 1; }
    done
  done
done

"$PYTHON" - "$work" "$ranks" "$runs" "$iters" "$build" "${list[@]}" <<'EOF'
import glob, json, statistics, sys
work, ranks, runs, iters, build, sizes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]

def times(kind, size):
    out = []
    for path in sorted(glob.glob(f"{work}/{kind}.*.{size}.json")):
        doc = json.load(open(path))
        out.append(doc["time_us"] if kind == "bare" else doc["rows"][0]["time_us"])
    return out

kinds = [k for k in ("bare", "plait", "gloo") if glob.glob(f"{work}/{k}.*.json")]
names = {"bare": "bare plait", "plait": "torch plait", "gloo": "torch gloo"}
print(f"# allreduce f32 sum, np={ranks}, {iters} calls per run, {runs} runs, build {build}")
print("# µs per call, min / median / max over runs")
print("| bytes | " + " | ".join(names[k] for k in kinds) + " | torch plait - bare (medians) |")
print("|---:|" + "---:|" * len(kinds) + "---:|")
for size in sizes:
    cells, med = [], {}
    for k in kinds:
        t = times(k, size)
        med[k] = statistics.median(t)
        cells.append(f"{min(t):.1f} / {med[k]:.1f} / {max(t):.1f}")
    print(f"| {size} | " + " | ".join(cells) + f" | {med['plait'] - med['bare']:+.1f} |")
EOF
