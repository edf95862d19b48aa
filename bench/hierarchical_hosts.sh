#!/usr/bin/env bash
# The hierarchical allreduce on simulated hosts (PLAIT_HOST_ID: rank r on host r % HOSTS,
# shm within a host, tcp between hosts), its intra-host stages where the cost model puts them
# against ring phases over messages, and what the model picks by itself:
#
#   plait-hier   --algo hierarchical: stages on each host's collective segment when the model
#                prefers them (small and medium vectors), else ring phases over messages
#   plait-msgs   --algo hierarchical with PLAIT_SHM_COLL=off: ring phases over messages only
#   plait-auto   the algorithm the cost model picks, with host segments
#
#   bench/hierarchical_hosts.sh                    # np 4 on 2 hosts, 5 repetitions
#   NP=6 HOSTS=3 REPS=3 SIZES="8 65536" bench/hierarchical_hosts.sh
#
# Prints a markdown table (summarize_peers.py): the slowest rank's mean time per call,
# median (min-max) over the repetitions, every result checked.
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}
HOSTS=${HOSTS:-2}
REPS=${REPS:-5}
SIZES=${SIZES:-"8 1024 16384 65536 1048576"}
PLAIT=$(realpath "${PLAIT:-build/tools/plait/plait}")
OUT=$(mktemp -d /tmp/plait-hosts.XXXXXX)

for rep in $(seq 1 "$REPS"); do
  for variant in hier msgs auto; do
    algo=hierarchical
    shm=auto
    [ "$variant" = msgs ] && shm=off
    [ "$variant" = auto ] && algo=auto
    for size in $SIZES; do
      json="$OUT/plait-$variant-np$NP-rep$rep-$size.json"
      PLAIT_SHM_COLL=$shm "$PLAIT" run -n "$NP" -- sh -c \
        "PLAIT_HOST_ID=h\$((RANK % $HOSTS)) exec '$PLAIT' bench allreduce --algo $algo \
         --min $size --max $size --check --json '$json'" >/dev/null
    done
  done
done
python3 bench/summarize_peers.py "$OUT" "$NP"
