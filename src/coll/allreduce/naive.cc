// Naive allreduce: every rank sends its whole vector to every other rank and reduces all n
// vectors itself. One round, n-1 messages of the full size per rank: only sensible for
// tiny messages on few ranks, and the reference the other algorithms are measured against.
#include "coll/builders.h"
#include "coll/phases.h"

namespace plait::coll {

Schedule build_allreduce_naive(const CollArgs& args) {
  ScheduleBuilder b(args, "naive");
  const Slice in = in_slice({0, args.count});
  const Slice out = out_slice({0, args.count});
  std::vector<Contribution> parts;
  for (int p = 0; p < args.size; ++p) {
    if (p == args.rank) {
      parts.push_back({-1, in});
    } else {
      if (in.count) b.send(p, in);
      parts.push_back({p, {}});
    }
  }
  // Every rank combines in rank order, so all ranks hold bit-identical floating-point sums.
  reduce_in_order(b, std::move(parts), out);
  return std::move(b).finish();
}

}  // namespace plait::coll
