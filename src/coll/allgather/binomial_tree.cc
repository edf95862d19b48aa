// Binomial-tree allgather(v): a binomial gather of every block to rank 0, then a binomial
// broadcast of the gathered output. 2 ceil(log2 n) steps; the broadcast moves the whole
// output, so this is for small totals. Blocks that are adjacent in the output travel in one
// message; v-variant layouts with gaps or out-of-order displacements travel as runs.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_allgatherv_binomial_tree(const CollArgs& args) {
  ScheduleBuilder b(args, "binomial_tree");
  const std::vector<Range> blocks = rank_blocks(args);
  const Group tree = rotated_group(args.size, args.rank, 0);
  const Slice own = in_slice({0, blocks[static_cast<size_t>(args.rank)].count});
  binomial_gather_blocks(
      b, tree,
      {.at = [&](int u) { return out_slice(blocks[static_cast<size_t>(u)]); },
       .joined = [&](int u) {
         return blocks[static_cast<size_t>(u)].offset == blocks[static_cast<size_t>(u - 1)].end();
       }},
      own);
  for (const Range& run : covered_runs(blocks)) {
    binomial_bcast(b, tree, out_slice(run), out_slice(run));
  }
  return std::move(b).finish();
}

Schedule build_allgather_binomial_tree(const CollArgs& args) {
  return build_allgatherv_binomial_tree(args);
}

}  // namespace plait::coll
