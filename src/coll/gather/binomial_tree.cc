// Binomial-tree gather: ceil(log2 n) steps; a rank forwards its whole subtree's blocks in
// one message (two where the subtree's ranks wrap past n-1 in the root's output). Ranks
// with children keep their subtree's blocks in scratch, in tree order.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_gather_binomial_tree(const CollArgs& args) {
  ScheduleBuilder b(args, "binomial_tree");
  const int n = args.size;
  const size_t count = args.count;
  const Group tree = rotated_group(n, args.rank, args.root);
  const TreeNode node = binomial_node(n, tree.pos);
  const bool root = tree.pos == 0;
  Slice stash{BufferId::kScratch, 0, 0};
  if (!root && !node.children.empty()) {
    stash = b.scratch(static_cast<size_t>(node.end - tree.pos) * count);
  }
  binomial_gather_blocks(
      b, tree,
      {.at = [&](int u) {
         if (root) return out_slice({static_cast<size_t>(tree.rank(u)) * count, count});
         return sub(stash, static_cast<size_t>(u - tree.pos) * count, count);
       },
       // Position u follows u-1 in the root's output unless it is rank 0 (the wrap).
       .joined = [&](int u) { return tree.rank(u) != 0; }},
      in_slice({0, count}));
  return std::move(b).finish();
}

}  // namespace plait::coll
