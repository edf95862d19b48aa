// Naive allreduce: every rank sends its whole vector to every other rank and reduces all n
// vectors itself. One round, n-1 messages of the full size per rank: only sensible for
// tiny messages on few ranks, and the reference the other algorithms are measured against.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_allreduce_naive(const CollArgs& args) {
  ScheduleBuilder b(args, "naive");
  const Slice in = in_slice({0, args.count});
  const Slice out = out_slice({0, args.count});
  // Each rank starts with its right-hand neighbour: in rank order every rank's first message
  // would go to rank 0 and its last to rank n-1, which then finished last and started the
  // next call late, holding back everyone's receive from it.
  for (int k = 1; k < args.size && in.count; ++k) b.send((args.rank + k) % args.size, in);
  std::vector<Contribution> parts;
  for (int p = 0; p < args.size; ++p)
    parts.push_back(p == args.rank ? Contribution{-1, in} : Contribution{p, {}});
  // Every rank combines in rank order, so all ranks hold bit-identical floating-point sums.
  reduce_in_order(b, std::move(parts), out);
  return std::move(b).finish();
}

}  // namespace plait::coll
