#!/usr/bin/env bash
# plait bench allreduce beside the peers of ../shared/peers (Open MPI over shm and TCP,
# MPICH, torch.distributed gloo) and Intel oneCCL (bench/oneccl/run.sh, the peer `oneccl`),
# back to back in one run, REPS repetitions, medians.
#
#   bench/compare_peers.sh                  # np 2 and 4, 3 repetitions
#   NPS="2" REPS=5 PEERS="ompi-shm gloo" bench/compare_peers.sh
#   PEERS="ompi-shm oneccl" bench/compare_peers.sh
#   TRANSPORTS="auto tcp" PEERS="ompi-shm ompi-tcp" bench/compare_peers.sh   # + plait over TCP
#
# Prints one markdown table per np: time (us) and busbw (GB/s) per size and implementation.
# Every implementation is measured and reported alike: the slowest rank's mean time per call
# (a collective is done when its last rank is; busbw is computed from that time), and the
# result is checked after the timed loop (plait with --check, the peers by their own check);
# a wrong result shows as FAIL in its cell instead of a number. With REPS > 1 a cell also
# gives the fastest and slowest run's time: median (min-max).
set -euo pipefail
cd "$(dirname "$0")/.."
NPS=${NPS:-"2 4"}
REPS=${REPS:-3}
PEERS=${PEERS:-"ompi-shm ompi-tcp mpich gloo oneccl"}
SIZES=${SIZES:-"8 1024 65536 1048576 16777216 67108864"}
# plait's PLAIT_TRANSPORT values to run; "auto" is the column "plait", any other T "plait-T".
TRANSPORTS=${TRANSPORTS:-auto}
PEERS_DIR=${PEERS_DIR:-../shared/peers}
# The gloo column is the gloo of the project's torch (2.15, .venv/), not Debian's 1.13.
export PEERS_PY=${PEERS_PY:-$PWD/.venv/bin/python}
PLAIT=${PLAIT:-build/tools/plait/plait}
# oneCCL is not one of ../shared/peers: it has its own runner (which builds it on first use).
ONECCL_RUN=${ONECCL_RUN:-bench/oneccl/run.sh}
SHARED_PEERS=""
ONECCL=no
for peer in $PEERS; do
  if [ "$peer" = oneccl ]; then ONECCL=yes; else SHARED_PEERS="$SHARED_PEERS $peer"; fi
done
# Ranks bound to cores when there are enough, as mpirun binds the MPI peers' ranks.
export PLAIT_BIND=${PLAIT_BIND:-auto}
OUT=$(mktemp -d /tmp/plait-compare.XXXXXX)

for rep in $(seq 1 "$REPS"); do
  for np in $NPS; do
    for transport in $TRANSPORTS; do
      name=plait
      [ "$transport" = auto ] || name=plait-$transport
      for size in $SIZES; do
        json="$OUT/$name-np$np-rep$rep-$size.json"
        # Exit status 1 means --check found wrong elements: the JSON record says how many and
        # the table marks it; anything else is a failure of the run itself.
        status=0
        PLAIT_TRANSPORT=$transport "$PLAIT" bench -n "$np" allreduce --min "$size" \
          --max "$size" --check --json "$json" >/dev/null || status=$?
        if [ "$status" -ne 0 ] && { [ "$status" -ne 1 ] || [ ! -s "$json" ]; }; then
          echo "compare_peers: $name bench -n $np at $size bytes failed (exit $status)" >&2
          exit 1
        fi
      done
    done
    peers_out="$OUT/peers-np$np-rep$rep.txt"
    : > "$peers_out"
    if [ -n "$SHARED_PEERS" ]; then
      NP=$np PEERS="${SHARED_PEERS# }" SIZES="$SIZES" "$PEERS_DIR/run.sh" >> "$peers_out" 2>&1 || true
    fi
    if [ "$ONECCL" = yes ]; then
      # Its RESULT lines join the other peers'; the rest (oneCCL's warnings, a failure's
      # cause) stays in a log. The runner bounds each run of ranks itself; this outer limit
      # also covers a first build. Sizes a failed run did not reach show as "-".
      log="$OUT/oneccl-np$np-rep$rep.log"
      status=0
      timeout -k 10 1200 "$ONECCL_RUN" "$np" "$SIZES" > "$log" 2>&1 || status=$?
      grep -E '^(RESULT|#)' "$log" >> "$peers_out" || true
      [ "$status" -eq 0 ] || echo "compare_peers: oneccl at np $np failed (exit $status), see $log" >&2
    fi
  done
done
python3 bench/summarize_peers.py "$OUT" "$NPS"
