// Binomial-tree allreduce: reduce to rank 0 along a binomial tree, then broadcast back down
// the same tree. 2 ceil(log2 n) steps of the full vector; good for small and medium
// messages. With chunk_count set both directions pipeline: the broadcast of chunk i leaves
// rank 0 as soon as chunk i is reduced, and a rank sends chunk i + 2 depth + 1 up only once
// chunk i has come back down (tree_reduce_bcast).
#include "coll/schedule/binary_tree.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_allreduce_binomial_tree(const CollArgs& args) {
  ScheduleBuilder b(args, "binomial_tree");
  const Group tree = rotated_group(args.size, args.rank, 0);
  tree_reduce_bcast(b, binomial_links(tree), in_slice({0, args.count}),
                    out_slice({0, args.count}));
  return std::move(b).finish();
}

}  // namespace plait::coll
