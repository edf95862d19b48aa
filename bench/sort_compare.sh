#!/usr/bin/env bash
# plait sort (pull and push) beside GNU sort --parallel=2 and Dask distributed's sort of the
# same records, in one run, REPS repetitions each; every output validated.
#
#   bench/sort_compare.sh                          # 40m records (4 GB), 4 ranks, 3 repetitions
#   RECORDS=10m REPS=1 PEERS="gnu" bench/sort_compare.sh
#   RECORDS=160m MEMORY=1G MODES=pull REPS=1 LOW_DISK=1 PEERS=gnu bench/sort_compare.sh   # 16 GB, spilling
#   ... PEERS="gnu dask" DASK_ARGS="--chunk-mb 256 --partitions-per-worker 8 --memory-limit 4GB"
#
# MEMORY: plait's budget per rank (--memory; push cannot spill, so MODES=pull). LOW_DISK=1
# keeps one form of the records on disk at a time (16 GB needs the binary input, spill files
# and output, ~45 GB, then the ASCII input, GNU sort's temporary files and output): the
# binary input goes before GNU sort runs (Dask runs before it) and each sorter's output once
# validated; one repetition only.
# plait: `plait run -n RANKS -- plait sort run` on the binary records of `plait sort gen`
# (read, sample, map, shuffle, sort, write; the slowest rank's phases). GNU sort: the ASCII
# form of the same record range (`plait sort gen --ascii`, gensort -a's bytes) in one file,
# LC_ALL=C sort --parallel=2 -S 60% (lines: the 10-byte key first). Dask: bench/dask_sort.py,
# RANKS worker processes. Every sorter's output is on disk when its clock stops (plait
# fdatasyncs its part files; GNU sort's file and Dask's are synced). Needs python3-distributed and python3-pandas for Dask (installed
# here if missing, as root). Prints a markdown table: seconds and GB/s, median (min-max).
set -euo pipefail
cd "$(dirname "$0")/.."
RECORDS=${RECORDS:-40m}
RANKS=${RANKS:-4}
REPS=${REPS:-3}
PEERS=${PEERS:-"gnu dask"}
MODES=${MODES:-"pull push"}
MEMORY=${MEMORY:-}
DASK_ARGS=${DASK_ARGS:-}  # e.g. past memory: "--chunk-mb 256 --partitions-per-worker 8 --memory-limit 4GB"
LOW_DISK=${LOW_DISK:-0}
WORK=${WORK:-/tmp/plait-sort-bench}
PLAIT=$(realpath "${PLAIT:-build/tools/plait/plait}")

if [[ " $PEERS " == *" dask "* ]] && ! /usr/bin/python3 -c "import distributed, pandas" 2>/dev/null; then
  bash scripts/install-deps.sh python3-distributed python3-pandas
fi
rm -rf "$WORK"
mkdir -p "$WORK"
echo "generating $RECORDS records (binary, $RANKS files; ascii, one file)" >&2
"$PLAIT" run -n "$RANKS" -- "$PLAIT" sort gen --records "$RECORDS" --out "$WORK/in" >/dev/null
bytes=$(stat -c %s "$WORK"/in/input-* | awk '{ s += $1 } END { print s }')
ascii() { [ -d "$WORK/ascii" ] || "$PLAIT" sort gen --records "$RECORDS" --ascii --out "$WORK/ascii" >/dev/null; }
[ "$LOW_DISK" = 1 ] || ascii
if [ "$LOW_DISK" = 1 ] && [ "$REPS" != 1 ]; then
  echo "sort_compare: LOW_DISK=1 takes REPS=1 (the binary input goes before GNU sort)" >&2
  exit 2
fi
memory_args=()
[ -z "$MEMORY" ] || memory_args=(--memory "$MEMORY")

declare -A times
run() {  # NAME OUTDIR CMD...: times CMD, validates OUTDIR against the input
  local name=$1 out=$2
  shift 2
  rm -rf "$out"
  mkdir -p "$out"
  sync
  echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >"$WORK/$name.log" 2>&1 || { echo "$name failed:" >&2; tail -5 "$WORK/$name.log" >&2; return 1; }
  t1=$(date +%s.%N)
  local expect=$WORK/in
  [ "$name" = gnu ] && expect=$WORK/ascii
  "$PLAIT" sort validate "$out" --expect "$expect" >"$WORK/$name.validate" ||
    { echo "$name: output does not validate" >&2; cat "$WORK/$name.validate" >&2; return 1; }
  times[$name]="${times[$name]:-} $(echo "$t1 - $t0" | bc)"
  [ "$LOW_DISK" = 1 ] && rm -rf "$out"
  return 0
}

for rep in $(seq 1 "$REPS"); do
  for mode in $MODES; do
    run "plait-$mode" "$WORK/out-$mode" "$PLAIT" run -n "$RANKS" -- "$PLAIT" sort run \
      --in "$WORK/in" --out "$WORK/out-$mode" --mode "$mode" "${memory_args[@]}" \
      --json "$WORK/$mode-$rep.json"
  done
  if [[ " $PEERS " == *" dask "* ]]; then
    run dask "$WORK/out-dask" /usr/bin/python3 bench/dask_sort.py --in "$WORK/in" \
      --out "$WORK/out-dask" --workers "$RANKS" $DASK_ARGS || echo "dask: no time (above)" >&2
  fi
  if [[ " $PEERS " == *" gnu "* ]]; then
    [ "$LOW_DISK" = 1 ] && rm -rf "$WORK/in"  # GNU sort's output is checked against its own input
    ascii
    # sync FILE: on disk before the clock stops, as plait's part files (fdatasync) are.
    run gnu "$WORK/out-gnu" bash -c "LC_ALL=C sort --parallel=2 -S 60% -T '$WORK' \
      -o '$WORK/out-gnu/part-00000' '$WORK/ascii/input-00000' && sync '$WORK/out-gnu/part-00000'"
  fi
done

echo
echo "| sorter | seconds: median (min-max) | GB/s (median) |"
echo "|---|---:|---:|"
for name in plait-pull plait-push gnu dask; do
  [ -n "${times[$name]:-}" ] || continue
  echo "${times[$name]}" | tr ' ' '\n' | sed '/^$/d' | sort -g | awk -v n="$name" -v b="$bytes" '
    { t[NR] = $1 } END { m = t[int((NR + 1) / 2)]
      printf "| %s | %.2f (%.2f-%.2f) | %.3f |\n", n, m, t[1], t[NR], b / 1e9 / m }'
done
echo
echo "plait phases (slowest rank, seconds), per run:"
for f in "$WORK"/pull-*.json "$WORK"/push-*.json; do
  if [ -f "$f" ]; then echo "  $(basename "$f"): $(sed 's/.*"phases"://' "$f")"; fi
done
