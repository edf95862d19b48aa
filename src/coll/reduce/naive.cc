// Naive reduce: every rank sends its vector straight to the root, which reduces the n
// vectors in rank order. One step, but the root receives (n-1) full vectors.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_reduce_naive(const CollArgs& args) {
  ScheduleBuilder b(args, "naive");
  const Slice in = in_slice({0, args.count});
  if (args.rank != args.root) {
    if (in.count) b.send(args.root, in);
    return std::move(b).finish();
  }
  std::vector<Contribution> parts;
  for (int p = 0; p < args.size; ++p) {
    parts.push_back(p == args.rank ? Contribution{-1, in} : Contribution{p, {}});
  }
  reduce_in_order(b, std::move(parts), out_slice({0, args.count}));
  return std::move(b).finish();
}

}  // namespace plait::coll
