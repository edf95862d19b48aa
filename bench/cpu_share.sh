#!/usr/bin/env bash
# Runs a command in a CPU cgroup of its own, capped at SHARE cores (default: the host's cores
# over LOCAL_WORLD_SIZE, or WORLD_SIZE), so that ranks sharing a host behave like ranks on
# machines of their own: a rank that waits leaves its share idle instead of lending it to a
# busy one. Used by bench/moe_lm_compare.py; needs root (cgroup v1 cpu or v2).
#
#   plait run -n 4 -- bench/cpu_share.sh python examples/moe_lm.py ...
set -euo pipefail
ranks=${LOCAL_WORLD_SIZE:-${WORLD_SIZE:-1}}
share=${SHARE:-$(awk -v c="$(nproc)" -v n="$ranks" 'BEGIN { printf "%.3f", c / n }')}
name="plait-share-$$-${RANK:-0}"
period=${PERIOD_US:-10000}
quota=$(awk -v s="$share" -v p="$period" 'BEGIN { printf "%d", s * p }')
if [ -d /sys/fs/cgroup/cpu ] && [ -w /sys/fs/cgroup/cpu ]; then      # cgroup v1
  dir=/sys/fs/cgroup/cpu/$name
  mkdir "$dir"
  echo "$period" > "$dir/cpu.cfs_period_us"
  echo "$quota" > "$dir/cpu.cfs_quota_us"
  echo $$ > "$dir/cgroup.procs"
elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then                    # cgroup v2
  dir=/sys/fs/cgroup/$name
  mkdir "$dir"
  echo "$quota $period" > "$dir/cpu.max"
  echo $$ > "$dir/cgroup.procs"
else
  echo "cpu_share: no writable cpu cgroup" >&2
  exit 1
fi
# The cgroup goes once the command ends (its processes must have left it first).
"$@" && status=0 || status=$?
echo $$ > "$(dirname "$dir")/cgroup.procs"
rmdir "$dir" 2>/dev/null || true
exit "$status"
