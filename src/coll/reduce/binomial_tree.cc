// Binomial-tree reduce: ceil(log2 n) steps, each moving the full vector; partial sums
// build up in every rank's output (the communicator gives non-roots a temporary one).
// With chunk_count set the tree pipelines: a rank forwards chunk i while chunk i+1 is
// still arriving from its children.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_reduce_binomial_tree(const CollArgs& args) {
  ScheduleBuilder b(args, "binomial_tree");
  binomial_reduce(b, rotated_group(args.size, args.rank, args.root), in_slice({0, args.count}),
                  out_slice({0, args.count}));
  return std::move(b).finish();
}

}  // namespace plait::coll
