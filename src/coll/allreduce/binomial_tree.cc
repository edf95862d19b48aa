// Binomial-tree allreduce: reduce to rank 0 along a binomial tree, then broadcast back down
// the same tree. 2 ceil(log2 n) steps of the full vector; good for small and medium
// messages. With chunk_count set both trees pipeline, and the broadcast of chunk i leaves
// rank 0 as soon as chunk i is reduced.
#include "coll/builders.h"
#include "coll/phases.h"

namespace plait::coll {

Schedule build_allreduce_binomial_tree(const CollArgs& args) {
  ScheduleBuilder b(args, "binomial_tree");
  const Group tree = rotated_group(args.size, args.rank, 0);
  const Slice out = out_slice({0, args.count});
  binomial_reduce(b, tree, in_slice({0, args.count}), out);
  binomial_bcast(b, tree, out, out);
  return std::move(b).finish();
}

}  // namespace plait::coll
