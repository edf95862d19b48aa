// Naive reduce-scatter(v): every rank sends block p of its input straight to rank p, which
// reduces the n contributions in rank order. One step, n-1 messages each way per rank.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_reduce_scatterv_naive(const CollArgs& args) {
  ScheduleBuilder b(args, "naive");
  const std::vector<Range> blocks = rank_blocks(args);
  const Range mine = blocks[static_cast<size_t>(args.rank)];
  // Sends start with the right-hand neighbour, as in the naive allreduce.
  for (int k = 1; k < args.size; ++k) {
    const int p = (args.rank + k) % args.size;
    if (const Range r = blocks[static_cast<size_t>(p)]; r.count) b.send(p, in_slice(r));
  }
  std::vector<Contribution> parts;
  for (int p = 0; p < args.size; ++p)
    parts.push_back(p == args.rank ? Contribution{-1, in_slice(mine)} : Contribution{p, {}});
  reduce_in_order(b, std::move(parts), out_slice({0, mine.count}));
  return std::move(b).finish();
}

Schedule build_reduce_scatter_naive(const CollArgs& args) {
  return build_reduce_scatterv_naive(args);
}

}  // namespace plait::coll
