#!/usr/bin/env bash
# plait's allreduce over the ucx provider beside Open MPI's pml ucx, on the same UCX
# transports, back to back, REPS alternating repetitions; busbw in GB/s (nccl-tests' way).
#
#   bench/ucx_allreduce_compare.sh                        # np 2 and 4, tcp and sm, 3 reps
#   NPS=2 TLS=rc REPS=5 bench/ucx_allreduce_compare.sh    # on a host with an RDMA NIC
#
# plait runs with PLAIT_SHM_COLL=off, so that its allreduce moves messages through the
# provider (on one host it would otherwise use its shared segment, whatever the transport).
# Open MPI's allreduce is ../shared/peers/allreduce_bench.c (built by ../shared/peers/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
NPS=${NPS:-"2 4"}
TLS=${TLS:-"tcp sm"}
REPS=${REPS:-3}
SIZES=${SIZES:-"1048576 16777216 67108864"}
PLAIT=${PLAIT:-build/tools/plait/plait}
OMPI_BENCH=${OMPI_BENCH:-/tmp/plait-peers/allreduce_ompi}
[ -x "$OMPI_BENCH" ] || PEERS=ompi-shm SIZES=8 ../shared/peers/run.sh >/dev/null
OUT=$(mktemp -d /tmp/plait-ucx-ar.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

for rep in $(seq 1 "$REPS"); do
  for np in $NPS; do
    for tls in $TLS; do
      # pml_ucx_tls/devices "any": Open MPI otherwise takes UCX only over an RDMA NIC.
      UCX_TLS=$tls timeout 300 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" \
        --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any -x UCX_TLS="$tls" \
        "$OMPI_BENCH" --target-sec 0.3 $SIZES 2>/dev/null |
        sed -nE 's/^RESULT .*bytes=([0-9]+).*busbw_GBps=([0-9.]+).*/\1 \2/p' |
        awk -v k="ompi $np $tls" '{print k, $1, $2}' >>"$OUT/all"
      for size in $SIZES; do
        PLAIT_SHM_COLL=off PLAIT_TRANSPORT=ucx PLAIT_UCX_TLS=$tls timeout 300 "$PLAIT" bench \
          -n "$np" allreduce --min "$size" --max "$size" --json "$OUT/p.json" >/dev/null
        sed -E 's/.*"busbw_GBps":([0-9.eE+-]+).*/\1/' "$OUT/p.json" |
          awk -v k="plait $np $tls" -v s="$size" '{print k, s, $1}' >>"$OUT/all"
      done
    done
  done
done

stats() {  # who np tls size -> "median (min-max)"
  awk -v w="$1" -v n="$2" -v t="$3" -v s="$4" '$1 == w && $2 == n && $3 == t && $4 == s {print $5}' \
    "$OUT/all" | sort -g |
    awk '{v[NR] = $1} END {if (NR == 0) {print "-"; exit}
         printf "%.2f (%.2f-%.2f)", v[int((NR + 1) / 2)], v[1], v[NR]}'
}

echo "| np | UCX transport | bytes | plait over ucx busbw (GB/s) | Open MPI pml ucx busbw (GB/s) |"
echo "|---:|---|---:|---:|---:|"
for np in $NPS; do
  for tls in $TLS; do
    for size in $SIZES; do
      echo "| $np | $tls | $size | $(stats plait "$np" "$tls" "$size") | $(stats ompi "$np" "$tls" "$size") |"
    done
  done
done
echo
echo "(median (min-max) of $REPS alternating runs; $(date -u +%F), $(nproc) cores)"
