// Parameter-server style allreduce: the vector is cut into k shards and shard j is owned by
// rank j. Everyone pushes shard j to its owner, the owner reduces it (in rank order), then
// every owner sends its reduced shard back to everyone. k = args.ps_roots, or min(size, 4).
// Two rounds, but each owner receives (n-1)/k of the vector from n-1 peers at once: the
// incast a parameter server lives with. Each rank takes the owners (and each owner its peers)
// starting from the one after itself: in rank order every rank's first shard went to owner 0
// and every owner's first reply to rank 0, one incast after another while the other links
// idled (16 MiB on four 1 Gbit/s hosts, the same day: 312 ms in rank order, 272 so).
#include <algorithm>

#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_allreduce_ps(const CollArgs& args) {
  ScheduleBuilder b(args, "ps");
  const int n = args.size;
  const int k = std::clamp(args.ps_roots > 0 ? args.ps_roots : std::min(n, 4), 1, n);
  for (int i = 1; i <= k; ++i) {
    const int j = (args.rank + i) % k;
    const Range shard = even_block(args.count, k, j);
    if (shard.count == 0) continue;
    if (args.rank != j) {
      b.send(j, in_slice(shard));
      continue;
    }
    std::vector<Contribution> parts;
    for (int p = 0; p < n; ++p) {
      parts.push_back(p == j ? Contribution{-1, in_slice(shard)} : Contribution{p, {}});
    }
    reduce_in_order(b, std::move(parts), out_slice(shard));
  }
  for (int j = 0; j < k; ++j) {
    const Range shard = even_block(args.count, k, j);
    if (shard.count == 0) continue;
    if (args.rank == j) {
      for (int i = 1; i < n; ++i) b.send((j + i) % n, out_slice(shard));
    } else {
      b.recv(j, out_slice(shard));
    }
  }
  return std::move(b).finish();
}

}  // namespace plait::coll
