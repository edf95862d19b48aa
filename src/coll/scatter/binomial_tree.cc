// Binomial-tree scatter: ceil(log2 n) steps; a rank receives its whole subtree's blocks in
// one message (two where the subtree's ranks wrap past n-1 in the root's input) and passes
// each child its part. Leaves receive straight into their output.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_scatter_binomial_tree(const CollArgs& args) {
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
  binomial_scatter_blocks(
      b, tree,
      {.at = [&](int u) {
         if (root) return in_slice({static_cast<size_t>(tree.rank(u)) * count, count});
         return sub(stash, static_cast<size_t>(u - tree.pos) * count, count);
       },
       .joined = [&](int u) { return tree.rank(u) != 0; }},
      out_slice({0, count}));
  return std::move(b).finish();
}

}  // namespace plait::coll
