#!/usr/bin/env bash
# oneCCL's allreduce as a peer of bench/compare_peers.sh: builds oneccl_allreduce.cc against
# the oneCCL of .venv (PyPI's oneccl-cpu, oneccl-cpu-devel, impi-rt) into build-oneccl/ when
# missing or stale, then runs NP ranks on this host and prints the `RESULT label=oneccl ...`
# lines of ../shared/peers/run.sh's format.
#
#   bench/oneccl/run.sh 2 "8 65536 67108864"
#   ONECCL_LAUNCHER=mpiexec CCL_ATL_TRANSPORT=mpi bench/oneccl/run.sh 4 "8 1024"
#
# The oneCCL settings below are the defaults chosen in docs/oneccl_peer.md; any of them set
# in the environment wins, which is how that page's alternatives were measured.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NP=${1:?usage: bench/oneccl/run.sh NP \"SIZES\"}
SIZES=${2:-"8 1024 65536 1048576 16777216 67108864"}
TARGET_SEC=${TARGET_SEC:-0.3}
LABEL=${ONECCL_LABEL:-oneccl}
# Seconds for the whole run of NP ranks; a rank that hangs (a lost peer, a KVS that never
# forms) is killed then, and its sizes are missing from the table instead of blocking it.
RUN_TIMEOUT=${ONECCL_TIMEOUT:-300}
VENV=${ONECCL_VENV:-$ROOT/.venv}
BUILD=${ONECCL_BUILD:-$ROOT/build-oneccl}
BIN=$BUILD/oneccl_allreduce

[ -e "$VENV/lib/libccl.so.1" ] && [ -e "$VENV/include/oneapi/ccl.hpp" ] || {
  echo "oneccl: no oneCCL in $VENV (pip install oneccl-cpu-devel==2022.1.2 impi-rt)" >&2
  exit 2
}

# PyPI's oneccl-cpu ships libccl.so.1, which needs libccl.so.2 (the loader that also carries
# the Intel compiler runtime, _intel_fast_memcpy and the CPU-dispatch symbols), but only the
# full `oneccl` wheel of the same release holds libccl.so.2. Take that one file from it, into
# the build folder: the venv stays as pip left it.
if [ ! -e "$BUILD/lib/libccl.so.2" ]; then
  version=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("oneccl-cpu"))')
  wheels=$(mktemp -d /tmp/oneccl-wheel.XXXXXX)
  trap 'rm -rf "$wheels"' EXIT
  timeout 600 "$VENV/bin/pip" download -q --no-deps -d "$wheels" "oneccl==$version" >&2
  mkdir -p "$BUILD/lib"
  "$VENV/bin/python" - "$wheels"/oneccl-*.whl "$BUILD/lib" <<'EOF'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("/lib/libccl.so.2"))
    with open(dest + "/libccl.so.2", "wb") as f:
        f.write(z.read(name))
EOF
fi

# -Wl,--disable-new-dtags: an RPATH, not a RUNPATH, so that it also finds libccl.so.1's own
# dependency libccl.so.2 in the build folder.
if [ ! -x "$BIN" ] || [ "$HERE/oneccl_allreduce.cc" -nt "$BIN" ] || [ "$0" -nt "$BIN" ]; then
  mkdir -p "$BUILD"
  rm -f "$BIN"
  g++ -std=c++17 -O2 -Wall -I"$VENV/include" "$HERE/oneccl_allreduce.cc" -o "$BIN" \
    -L"$VENV/lib" -lccl -Wl,--disable-new-dtags,-rpath,"$BUILD/lib:$VENV/lib" 2>&1 |
    grep -v 'may conflict with libccl.so.1' >&2 || true
  [ -x "$BIN" ] || { echo "oneccl: build failed" >&2; exit 2; }
fi

# What Intel's vars scripts (etc/conda/activate.d) export: the bundled libfabric and its
# providers, found in the venv's lib/.
export CCL_ROOT=$VENV I_MPI_ROOT=$VENV FI_PROVIDER_PATH=$VENV/lib
export LD_LIBRARY_PATH=$VENV/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# OFI transport over libfabric's shm provider: ranks of one host need nothing else, and the
# MPI transport would need Intel MPI's launcher (ONECCL_LAUNCHER=mpiexec).
export CCL_ATL_TRANSPORT=${CCL_ATL_TRANSPORT:-ofi}
# FI_PROVIDER set empty leaves the choice to libfabric (with CCL_ATL_SHM=1: shm for ranks
# of this host, tcp for others).
if [ "$CCL_ATL_TRANSPORT" = ofi ]; then
  export CCL_ATL_SHM=${CCL_ATL_SHM:-1}
  export FI_PROVIDER=${FI_PROVIDER-shm}
  [ -n "$FI_PROVIDER" ] || unset FI_PROVIDER
fi
export CCL_WORKER_COUNT=${CCL_WORKER_COUNT:-1}
# Warnings (each variable set here, each shm endpoint name) would bury the results.
export CCL_LOG_LEVEL=${CCL_LOG_LEVEL:-error}
# A rank's waits and its worker spin; with `pause` (oneCCL's default) a spinning thread keeps
# its core for its whole time slice while the thread it waits for cannot run: on this
# oversubscribed host that made an 8 B allreduce take ~20 ms. sched_yield hands the core over.
export CCL_YIELD=${CCL_YIELD:-sched_yield}
# Rank pinning: "core" binds rank r to core r mod ncores (as mpirun binds the MPI peers) and,
# unless CCL_WORKER_AFFINITY says otherwise, puts the rank's workers on that core too, so
# that its waiting thread yields straight to its own worker; "none" leaves the ranks to the
# scheduler and the workers to oneCCL's automatic pinning (the last cores of the host).
BIND=${ONECCL_BIND:-core}
LAUNCHER=${ONECCL_LAUNCHER:-own}
NCORES=$(nproc)
if [ "$BIND" = core ] && [ -z "${CCL_WORKER_AFFINITY:-}" ]; then
  # oneCCL reads the list by local rank, then worker: entry r * count + w.
  CCL_WORKER_AFFINITY=$(for r in $(seq 0 $((NP - 1))); do
    for w in $(seq 1 "$CCL_WORKER_COUNT"); do echo $((r % NCORES)); done
  done | paste -sd,)
fi
[ -z "${CCL_WORKER_AFFINITY:-}" ] || export CCL_WORKER_AFFINITY

RUN=$(mktemp -d /tmp/oneccl-run.XXXXXX)
trap 'rm -rf "$RUN" ${wheels:+"$wheels"}' EXIT
args=(--target-sec "$TARGET_SEC" --label "$LABEL" --kvs-file "$RUN/kvs" $SIZES)

status=0
if [ "$LAUNCHER" = mpiexec ]; then
  # Intel MPI's hydra starts the ranks and gives them PMI_RANK/PMI_SIZE; needed when
  # CCL_ATL_TRANSPORT=mpi, since oneCCL's MPI transport joins the job mpiexec started.
  export I_MPI_PIN=0
  if [ "$BIND" = core ]; then
    export I_MPI_PIN=1
    I_MPI_PIN_PROCESSOR_LIST=$(seq 0 $((NP - 1)) | while read -r r; do echo $((r % NCORES)); done | paste -sd,)
    export I_MPI_PIN_PROCESSOR_LIST
  fi
  timeout -k 10 "$RUN_TIMEOUT" "$VENV/bin/mpiexec" -n "$NP" "$BIN" "${args[@]}" \
    > "$RUN/out.0" 2> "$RUN/err.0" || status=$?
  ranks=0
else
  # Our own launcher: NP processes, the KVS address passed through $RUN/kvs. oneCCL learns
  # each rank's place on the host from CCL_LOCAL_RANK/CCL_LOCAL_SIZE, as for any launcher
  # other than Intel MPI's (CCL_PROCESS_LAUNCHER=none).
  export CCL_PROCESS_LAUNCHER=none CCL_LOCAL_SIZE=$NP
  pids=()
  for r in $(seq 0 $((NP - 1))); do
    pin=()
    [ "$BIND" = core ] && pin=(taskset -c $((r % NCORES)))
    CCL_LOCAL_RANK=$r timeout -k 10 "$RUN_TIMEOUT" "${pin[@]}" "$BIN" --rank "$r" \
      --size "$NP" "${args[@]}" > "$RUN/out.$r" 2> "$RUN/err.$r" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || { s=$?; [ "$status" -ne 0 ] || status=$s; }
  done
  ranks=$((NP - 1))
fi
# Rank 0 prints the results; oneCCL prints its own messages to stdout too: those, and
# anything from the other ranks, go to stderr (under mpiexec, all ranks share out.0).
grep -E '^(RESULT|#|  )' "$RUN/out.0" || true
for r in $(seq 0 "$ranks"); do
  grep -v -E '^(RESULT|#|  )' "$RUN/out.$r" "$RUN/err.$r" | sed "s/^[^:]*:/[rank $r] /" >&2 || true
done
case $status in
  0) ;;
  124|137) echo "oneccl: np=$NP timed out after ${RUN_TIMEOUT}s" >&2 ;;
  *) echo "oneccl: np=$NP: a rank exited $status" >&2 ;;
esac
exit "$status"
