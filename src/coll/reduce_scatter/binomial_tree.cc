// Binomial-tree reduce-scatter(v): a binomial reduce of the whole input to rank 0, then a
// binomial scatter of the blocks. 2 ceil(log2 n) steps; the reduce moves the whole input,
// so this is for small messages. Partial sums live in a scratch mirror of the input (only
// ranks with children need one); v-variant layouts reduce only the elements some block
// covers.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_reduce_scatterv_binomial_tree(const CollArgs& args) {
  ScheduleBuilder b(args, "binomial_tree");
  const std::vector<Range> blocks = rank_blocks(args);
  const Range mine = blocks[static_cast<size_t>(args.rank)];
  const Group tree = rotated_group(args.size, args.rank, 0);
  const TreeNode node = binomial_node(tree.n(), tree.pos);
  const std::vector<Range> runs = covered_runs(blocks);
  const bool keeps_partials = !node.children.empty() || node.parent < 0;
  const size_t extent = runs.empty() ? 0 : runs.back().end();
  // Leaves send their input and receive their block directly; they never touch the mirror.
  const Slice mirror = keeps_partials ? b.scratch(extent) : Slice{BufferId::kScratch, 0, extent};
  for (const Range& run : runs) {
    binomial_reduce(b, tree, in_slice(run), sub(mirror, run.offset, run.count));
  }
  binomial_scatter_blocks(
      b, tree,
      {.at = [&](int u) {
         const Range r = blocks[static_cast<size_t>(u)];
         return sub(mirror, r.offset, r.count);
       },
       .joined = [&](int u) {
         return blocks[static_cast<size_t>(u)].offset == blocks[static_cast<size_t>(u - 1)].end();
       }},
      out_slice({0, mine.count}));
  return std::move(b).finish();
}

Schedule build_reduce_scatter_binomial_tree(const CollArgs& args) {
  return build_reduce_scatterv_binomial_tree(args);
}

}  // namespace plait::coll
