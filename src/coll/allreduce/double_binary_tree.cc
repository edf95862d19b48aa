// Double binary tree allreduce (NCCL 2.4): the vector's two halves go up and back down two
// binary trees whose interior nodes are each other's leaves (binary_tree.h), so each rank
// forwards data in one tree and only sends its own half and receives the result in the
// other. Depth ceil(log2 n) like a binomial tree, but with chunk_count set it pipelines:
// chunk i comes down while chunk i+1 goes up, and per chunk each rank moves about four
// half-chunks, so large vectors approach ring bandwidth with log-depth latency.
// The two trees touch disjoint halves of the buffers; the builder's hazard tracking
// orders nothing between them.
#include "coll/schedule/binary_tree.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_allreduce_double_binary_tree(const CollArgs& args) {
  ScheduleBuilder b(args, "double_binary_tree");
  const std::array<TreeLinks, 2> trees = double_binary_tree(args.size, args.rank);
  for (int t = 0; t < 2; ++t) {
    const Range half = even_block(args.count, 2, t);
    tree_reduce_bcast(b, trees[static_cast<size_t>(t)], in_slice(half), out_slice(half));
  }
  return std::move(b).finish();
}

}  // namespace plait::coll
