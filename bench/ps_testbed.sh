#!/usr/bin/env bash
# The parameter server against plait's ring allreduce on a testbed of network-namespace
# "hosts" with capped links (../shared/peers/netns_lab.sh: a bridge, TBF on both directions
# of every host link). Needs root.
#
#   bench/ps_testbed.sh                        # 4 worker hosts, 1 Gbit/s, 100 MB, 3 reps
#   WORKERS=2 RATE=1gbit BYTES=32M REPS=1 bench/ps_testbed.sh
#
# Four layouts, each REPS times, every rank its own process:
#   separate   W workers on hosts 0..W-1, W servers on hosts W..2W-1 (BytePS's layout:
#              servers on their own hosts), push_pull of BYTES in PARTITION partitions, each
#              call waited for before the next
#   pipelined  the same with two calls in flight (--depth 2), as a training loop that pushes
#              a step's gradients while the last step's parameters still come back
#   colocated  W workers and W servers, worker i and server i on host i
#   allreduce  plait bench allreduce --algo ring over the W worker hosts alone
# Prints per layout the slowest worker's seconds per call, median (min-max), the bytes a
# worker sends over its link per call (push_pull: BYTES each way, less the share of its own
# host's server when colocated; ring: 2(W-1)/W x BYTES each way) as a share of the line rate,
# and the CPU-seconds per GB of every thread of every rank during the timed calls.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${WORKERS:-4}
RATE=${RATE:-1gbit}
BYTES=${BYTES:-100000000}  # 100 MB, as BytePS counts
PARTITION=${PARTITION:-4M}
REPS=${REPS:-3}
ITERS=${ITERS:-3}
LAB=${LAB:-../shared/peers/netns_lab.sh}
PLAIT=$(realpath "${PLAIT:-build/tools/plait/plait}")
OUT=$(mktemp -d /tmp/plait-ps-testbed.XXXXXX)
PORT=$((29700 + RANDOM % 200))  # each job gets its own store port (MASTER_PORT + 1)

[ "$(id -u)" = 0 ] || { echo "ps_testbed: needs root (network namespaces)" >&2; exit 1; }
"$LAB" down >/dev/null 2>&1 || true
"$LAB" up $((2 * W))
trap '"$LAB" down >/dev/null 2>&1 || true' EXIT
"$LAB" shape "$RATE" tbf

# run_job NAME NRANKS HOST_OF_RANK_EXPR ARGS...: every rank in its namespace, rank 0's output
# kept in $OUT/NAME.log; fails when a rank does.
run_job() {
  local name=$1 n=$2 hostexpr=$3
  shift 3
  local pids=()
  PORT=$((PORT + 2))
  for ((r = 0; r < n; r++)); do
    local host=$((hostexpr))
    ip netns exec "plns$host" env RANK=$r WORLD_SIZE=$n LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
      MASTER_ADDR=192.168.77.1 MASTER_PORT=$PORT PLAIT_CONNECT_TIMEOUT=60000 \
      PLAIT_TIMEOUT=300000 PLAIT_PS_PARTITION="$PARTITION" "$PLAIT" "$@" \
      > "$OUT/$name.rank$r.log" 2>&1 &
    pids+=($!)
  done
  local status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  cp "$OUT/$name.rank0.log" "$OUT/$name.log"
  if [ "$status" != 0 ]; then
    cat "$OUT/$name".rank*.log >&2
    echo "ps_testbed: $name failed" >&2
    exit 1
  fi
}

for rep in $(seq 1 "$REPS"); do
  # r in 0..W-1 works; W..2W-1 serve.
  run_job "separate-$rep" $((2 * W)) 'r' bench ps --servers "$W" --min "$BYTES" --max "$BYTES" \
    --iters "$ITERS" --warmup 1 --check
  run_job "pipelined-$rep" $((2 * W)) 'r' bench ps --servers "$W" --min "$BYTES" --max "$BYTES" \
    --iters "$ITERS" --warmup 1 --check --depth 2
  run_job "colocated-$rep" $((2 * W)) "r % $W" bench ps --servers "$W" --min "$BYTES" \
    --max "$BYTES" --iters "$ITERS" --warmup 1 --check
  run_job "allreduce-$rep" "$W" 'r' bench allreduce --algo ring --min "$BYTES" --max "$BYTES" \
    --iters "$ITERS" --warmup 1 --check
done

python3 - "$OUT" "$W" "$RATE" "$REPS" <<'EOF'
import re, statistics, sys
out, w, rate, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
line_Bps = {"1gbit": 125e6, "10gbit": 1.25e9}.get(rate, 0)

busy = {}

def rows(name):
    times, cpus, size = [], [], 0
    for rep in range(1, reps + 1):
        text = open(f"{out}/{name}-{rep}.log").read()
        if name == "allreduce":
            # size count type redop algo root time algbw busbw cpu #wrong
            m = re.search(r"^\s*(\d+)\s+\d+\s+f32\s+sum\s+\S+\s+-?\d+\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)", text, re.M)
            size, t, cpu = int(m.group(1)), float(m.group(2)) * 1e-6, float(m.group(3))
        else:
            # bytes iters time worker_GB/s total_GB/s CPU_s/GB server_busy% ...
            m = re.search(r"^\s*(\d+)\s+\d+\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+(\d+)%", text, re.M)
            size, t, cpu = int(m.group(1)), float(m.group(2)) * 1e-6, float(m.group(3))
            busy.setdefault(name, []).append(int(m.group(4)))
        times.append(t)
        cpus.append(cpu)
    return size, times, cpus

print(f"# {w} worker hosts, links {rate}, TBF both directions; median (min-max) of {reps}")
print("| layout | seconds per call | bytes over a host's link, each way | share of line rate | CPU s/GB | a server's CPU busy |")
print("|---|---:|---:|---:|---:|---:|")
base = None
for name in ("separate", "pipelined", "colocated", "allreduce"):
    size, times, cpus = rows(name)
    med = statistics.median(times)
    # Colocated, a host's link carries its worker's pushes and its server's replies for the
    # other hosts: 2(W-1)/W of the vector each way, as the ring's.
    sent = size * (2 * (w - 1) / w if name in ("allreduce", "colocated") else 1)
    share = f"{100 * sent / med / line_Bps:.0f}%" if line_Bps else "-"
    srv = f"{statistics.median(busy[name]):.0f}%" if name in busy else "-"
    print(f"| {name} | {med:.3f} ({min(times):.3f}-{max(times):.3f}) | {sent / 1e6:.0f} MB | {share} | {statistics.median(cpus):.2f} | {srv} |")
    if name == "allreduce":
        base = med
for name in ("separate", "pipelined", "colocated"):
    size, times, _ = rows(name)
    print(f"# {name}: {base / statistics.median(times):.2f}x the ring allreduce's speed")
EOF
