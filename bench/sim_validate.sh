#!/usr/bin/env bash
# plait sim against the network-namespace testbed it models: HOSTS "hosts" on one bridge,
# every host link capped with TBF in both directions (../shared/peers/netns_lab.sh), measured
# with plait bench and predicted by plait sim on star:hosts=HOSTS,rate=RATE,burst=... Needs
# root.
#
#   bench/sim_validate.sh                                   # the issue's grid (long)
#   HOSTS=4 RATES=1gbit RPH=1 SIZES="1M 16M" ALGOS="ring halving_doubling" OPS=allreduce \
#     bench/sim_validate.sh                                 # a quick look
#
# The links are shaped here (not by netns_lab.sh's shape, whose burst for rates other than
# 1gbit is 8 MB: a 1 MiB collective at 200mbit then ran at the veth's speed): TBF on both
# directions of every host link, burst the rate's bytes per timer tick (HZ 250) rounded up to
# a power of two (512kb at 1gbit, 128kb at 200mbit), queue limit 4mb; plait sim models the
# same shaper (burst=) and counts what it counts (mtu=: frames of the veths' MTU, headers
# included, so that 1448 of every 1514 bytes are a message's). TBF queues in one FIFO, and a
# TCP stream whose window is open puts a whole message in it at once (tcp_limit_output_bytes
# is 4 MB here): a host's messages leave in the order its ranks post them, each taking what
# the one before leaves, so plait sim gets queue=fifo (binomial broadcast 1 MiB on eight
# 1 Gbit/s hosts: 27.1 ms measured, 26.3 predicted in posting order, 40.1 shared max-min).
#
# Per (hosts, rate): `plait tune --providers tcp` runs across two of the testbed's hosts, so
# the tune file's tcp alpha is the testbed's per-message cost (software, two veth hops and
# the shaper); `plait tune --providers shm` adds this host's intra-host, reduction and copy
# constants. plait sim reads that file (--tune) on a star whose links have RATE and no
# latency of their own (the alpha holds it). Each measured point is the median of ITERS
# calls (plait bench --check --sync), the same algorithm forced on both. plait sim predicts
# one call from a common start, and --sync measures that: a barrier before each call, the
# call's time its slowest rank's. Back to back, the calls of some launches settle into a
# slower rhythm (naive reduce-scatter of 1 MiB on eight 200 Mbit/s hosts: one launch in four
# at 70-73 ms a call against 38.5, the first call of the launch always at 36-39; with a
# barrier before each call, ten launches of ten at 38.4-38.8). A call that meets a TCP
# retransmission timeout (200 ms and up; the model has no losses) moves the mean of three
# calls by a third of it, the median not at all; the rows show the fastest and slowest call
# and the mean beside them.
# Prints one row per point: measured and predicted time, and the error (predicted -
# measured) / measured; then how many points are within 15 % and 30 %.
set -euo pipefail
cd "$(dirname "$0")/.."
# One run at a time: two would tear down and rebuild each other's namespaces, and their
# jobs would hang until the peer timeout.
exec 9>/run/lock/plait-netns-lab.lock
if ! flock -n 9; then
  echo "sim_validate: another run holds the testbed (/run/lock/plait-netns-lab.lock)" >&2
  exit 1
fi
HOSTS_LIST=${HOSTS:-"4 8"}
RATES=${RATES:-"1gbit 200mbit"}
RPH_LIST=${RPH:-"1 2"}
SIZES=${SIZES:-"1M 4M 16M 64M"}
OPS=${OPS:-"allreduce allgather reduce_scatter alltoall"}
ALGOS=${ALGOS:-"naive ps ring halving_doubling recursive_doubling binomial_tree double_binary_tree"}
ITERS=${ITERS:-3}
# Reno on the testbed's sockets: this kernel's default, BBR, takes a TBF-shaped link for a
# policer and holds its rate below it after a burst (recursive doubling 1 MiB on four 200 Mbit/s
# hosts: 132-159 ms against 88 with Reno, and 44 ms a step on two hosts with either); cubic is
# not allowed in a namespace here. TCP_CC= (empty) keeps the kernel's.
TCP_CC=${TCP_CC-reno}
SHAPER=${SHAPER:-tbf}
LAB=${LAB:-../shared/peers/netns_lab.sh}
PLAIT=$(realpath "${PLAIT:-build/tools/plait/plait}")
OUT=$(mktemp -d /tmp/plait-sim-validate.XXXXXX)
PORT=$((31000 + RANDOM % 500))

[ "$(id -u)" = 0 ] || { echo "sim_validate: needs root (network namespaces)" >&2; exit 1; }
"$LAB" down >/dev/null 2>&1 || true
trap '"$LAB" down >/dev/null 2>&1 || true' EXIT

# job N RPH LOG ARGS...: N ranks, RPH per namespace host (block placement, as plait sim's),
# all of them started in their host's namespace; fails when a rank does.
job() {
  local n=$1 rph=$2 log=$3
  shift 3
  local pids=()
  PORT=$((PORT + 2))
  for ((r = 0; r < n; r++)); do
    ip netns exec "plns$((r / rph))" env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$((r % rph)) \
      LOCAL_WORLD_SIZE="$rph" MASTER_ADDR=192.168.77.1 MASTER_PORT=$PORT \
      PLAIT_CONNECT_TIMEOUT=60000 PLAIT_TIMEOUT=600000 PLAIT_HOST_ID="h$((r / rph))" \
      "$PLAIT" "$@" > "$log.rank$r" 2>&1 &
    pids+=($!)
  done
  local status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  if [ "$status" != 0 ]; then
    cat "$log".rank* >&2
    echo "sim_validate: job failed: $*" >&2
    return 1
  fi
}

# json_number FILE KEY: a number of plait bench's one-line JSON record.
json_number() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" "$1"; }

# The TBF burst for RATE (bits per second as tc writes it): kilobytes, a power of two.
burst_kb() {
  local bits
  case $1 in
    *gbit) bits=$(( ${1%gbit} * 1000000000 )) ;;
    *mbit) bits=$(( ${1%mbit} * 1000000 )) ;;
    *) echo "sim_validate: RATES takes NNmbit or NNgbit, not $1" >&2; exit 2 ;;
  esac
  local kb=$(( (bits / 8 / 250 + 1023) / 1024 )) p=1
  while [ "$p" -lt "$kb" ]; do p=$((p * 2)); done
  echo "$p"
}

# TBF at RATE on both directions of every host link: the host's eth0 (host -> switch) and the
# bridge's port to it (switch -> host), as netns_lab.sh lays them out.
shape() {
  local rate=$1 hosts=$2 b
  b=$(burst_kb "$rate")kb
  for ((i = 0; i < hosts; i++)); do
    for target in "plns$i eth0" "plbr vbr$i"; do
      set -- $target
      tc -n "$1" qdisc del dev "$2" root 2>/dev/null || true
      tc -n "$1" qdisc add dev "$2" root tbf rate "$rate" burst "$b" limit 4mb
    done
  done
}

# SHAPER=fair: HTB at RATE on the same two ends instead, one class per peer host under it (the
# host's link: by destination; the switch's port: by source), equal shares, each borrowing up
# to RATE, a FIFO under each: a switch port that serves its inputs in turn and a NIC that
# serves its queues in turn, where one FIFO behind TBF lets the flows that started first keep
# most of the link.
shape_fair() {
  local rate=$1 hosts=$2 b q=65536
  b=$(burst_kb "$rate")kb
  local share
  share=$(( $(echo "$rate" | sed 's/gbit/000/; s/mbit//') / (hosts - 1) ))mbit
  for ((i = 0; i < hosts; i++)); do
    for target in "plns$i eth0 dst" "plbr vbr$i src"; do
      set -- $target
      tc -n "$1" qdisc del dev "$2" root 2>/dev/null || true
      tc -n "$1" qdisc add dev "$2" root handle 1: htb default 99
      tc -n "$1" class add dev "$2" parent 1: classid 1:1 htb rate "$rate" ceil "$rate" \
        burst "$b" cburst "$b" quantum "$q"
      tc -n "$1" class add dev "$2" parent 1:1 classid 1:99 htb rate 1mbit ceil "$rate" quantum "$q"
      for ((j = 0; j < hosts; j++)); do
        [ "$j" = "$i" ] && continue
        tc -n "$1" class add dev "$2" parent 1:1 classid "1:$((10 + j))" htb rate "$share" \
          ceil "$rate" burst "$b" cburst "$b" quantum "$q"
        tc -n "$1" qdisc add dev "$2" parent "1:$((10 + j))" bfifo limit 4mb
        tc -n "$1" filter add dev "$2" parent 1: protocol ip prio 1 u32 \
          match ip "$3" "192.168.77.$((j + 1))/32" flowid "1:$((10 + j))"
      done
    done
  done
}

echo "| hosts | rate | ranks/host | op | algo | bytes | measured (us) | plait sim (us) | error |" \
  "calls min-max (us) | mean (us) |"
echo "|---:|---|---:|---|---|---:|---:|---:|---:|---|---:|"
for hosts in $HOSTS_LIST; do
  "$LAB" down >/dev/null 2>&1 || true
  "$LAB" up "$hosts" >/dev/null
  for ((i = 0; i < hosts; i++)); do
    [ -n "$TCP_CC" ] && ip netns exec "plns$i" sysctl -qw net.ipv4.tcp_congestion_control="$TCP_CC"
    # Every job starts from a fresh TCP state: by default a closed connection leaves its RTT
    # in the host's metrics cache (100-170 ms after a job that filled the 4 MB queues) and the
    # next connection to that host starts from it.
    ip netns exec "plns$i" sysctl -qw net.ipv4.tcp_no_metrics_save=1
  done
  for rate in $RATES; do
    if [ "$SHAPER" = fair ]; then shape_fair "$rate" "$hosts"; else shape "$rate" "$hosts"; fi
    mtu=$(ip -n plns0 -o link show eth0 | sed -n 's/.* mtu \([0-9]*\) .*/\1/p')
    topology="star:hosts=$hosts,rate=$rate,latency=0us,burst=$(burst_kb "$rate")kb,mtu=$mtu,queue=fifo"
    tune="$OUT/tune-$hosts-$rate.conf"
    job 2 1 "$OUT/tune-$hosts-$rate" tune --providers tcp --out "$tune" >/dev/null
    "$PLAIT" tune --providers shm --out "$tune" >/dev/null
    for rph in $RPH_LIST; do
      n=$((hosts * rph))
      for op in $OPS; do
        algos=$ALGOS
        [ "$op" != allreduce ] && algos=$("$PLAIT" sim "$op" --topology "star:hosts=$hosts" \
          --ranks "$n" --ranks-per-host "$rph" --bytes 1M --json /dev/stdout |
          sed -n 's/.*"algo": "\([a-z_]*\)".*/\1/p' | tr '\n' ' ')
        [ "$op" = allreduce ] && [ "$rph" -gt 1 ] && algos="$algos hierarchical"
        for algo in $algos; do
          for size in $SIZES; do
            json="$OUT/bench-$hosts-$rate-$rph-$op-$algo-$size.json"
            job "$n" "$rph" "$OUT/log" bench "$op" --algo "$algo" --min "$size" --max "$size" \
              --iters "$ITERS" --warmup 1 --check --sync --json "$json" >/dev/null || continue
            measured=$(json_number "$json" median_us)
            mean=$(json_number "$json" time_us)
            fastest=$(json_number "$json" min_us)
            slowest=$(json_number "$json" max_us)
            bytes=$(json_number "$json" bytes)
            predicted=$("$PLAIT" sim "$op" --topology "$topology" \
              --ranks "$n" --ranks-per-host "$rph" --bytes "$bytes" --algo "$algo" \
              --tune "$tune" --json /dev/stdout | sed -n 's/.*"time_us": \([0-9.e+-]*\).*/\1/p')
            awk -v h="$hosts" -v r="$rate" -v p="$rph" -v o="$op" -v a="$algo" -v b="$bytes" \
              -v m="$measured" -v s="$predicted" -v lo="$fastest" -v hi="$slowest" \
              -v mean="$mean" 'BEGIN {
                printf "| %d | %s | %d | %s | %s | %d | %.0f | %.0f | %+.1f %% ", h, r, p, o, a, b,
                       m, s, (s - m) / m * 100
                printf "| %.0f-%.0f | %.0f |\n", lo, hi, mean }' |
              tee -a "$OUT/rows"
          done
        done
      done
    done
  done
done
# e + 0: after gsub the field is a string, and a string compares with 15 as text ("3.6" > "15").
awk -F'|' '{ e = $10; gsub(/[ %+]/, "", e); e = e + 0; e = e < 0 ? -e : e; n++; if (e < 15) a++; if (e < 30) b++ }
  END { if (n) printf "\n%d points: %d (%.0f %%) within 15 %%, %d (%.0f %%) within 30 %%\n",
                      n, a, 100 * a / n, b, 100 * b / n }' "$OUT/rows"
