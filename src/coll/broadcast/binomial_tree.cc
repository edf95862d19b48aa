// Binomial-tree broadcast: ceil(log2 n) steps of the full vector. With chunk_count set a
// rank forwards chunk i to its children while chunk i+1 is still arriving.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_broadcast_binomial_tree(const CollArgs& args) {
  ScheduleBuilder b(args, "binomial_tree");
  binomial_bcast(b, rotated_group(args.size, args.rank, args.root), in_slice({0, args.count}),
                 out_slice({0, args.count}));
  return std::move(b).finish();
}

}  // namespace plait::coll
