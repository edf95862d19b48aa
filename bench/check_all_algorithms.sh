#!/usr/bin/env bash
# Acceptance sweep: every collective with every algorithm forced, under plait run, with
# --check over 8 B .. 64 MiB; prints one line per (op, algo) with the wrong-element count.
#
#   bench/check_all_algorithms.sh            # 4 ranks
#   NP=3 MAX=1M bench/check_all_algorithms.sh
set -uo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}
MAX=${MAX:-64M}
PLAIT=${PLAIT:-build/tools/plait/plait}
failed=0
# `plait info` lists each collective with its algorithms.
declare -A ALGOS
while read -r op algos; do ALGOS[$op]=$algos; done < <("$PLAIT" info |
  sed -n '/^Collectives/,/^$/p' | sed 1d | awk 'NF > 1')
for op in allreduce reduce broadcast allgather reduce_scatter alltoall gather scatter barrier sendrecv; do
  for algo in auto ${ALGOS[$op]:-}; do
    out=$("$PLAIT" run -n "$NP" -- "$PLAIT" bench "$op" --algo "$algo" --check --min 8 \
            --max "$MAX" --iters 2 --warmup 1 2>&1)
    status=$?
    wrong=$(echo "$out" | sed -n 's/.*# Wrong elements: \([0-9]*\).*/\1/p')
    [ "$op" = barrier ] && wrong=${wrong:-0}
    if [ $status -ne 0 ] || [ "${wrong:-x}" != 0 ]; then
      failed=1
      echo "FAIL $op --algo $algo (status $status, wrong ${wrong:-?})"
      echo "$out" | tail -5
    else
      echo "ok   $op --algo $algo: 0 wrong"
    fi
  done
done
exit $failed
