// Van de Geijn's broadcast: a binomial scatter of the vector's n blocks from the root, then
// an allgather of the blocks (recursive doubling for a power-of-two size, a ring
// otherwise). About 2 times the vector per link instead of log2(n) times: the large-message
// broadcast.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_broadcast_halving_doubling(const CollArgs& args) {
  ScheduleBuilder b(args, "halving_doubling");
  const int n = args.size;
  const Group g = rotated_group(n, args.rank, args.root);
  const bool root = g.pos == 0;
  std::vector<Range> blocks;  // indexed by position, laid out in position order
  for (int u = 0; u < n; ++u) blocks.push_back(even_block(args.count, n, u));
  auto block = [&](int u) { return blocks[static_cast<size_t>(u)]; };
  binomial_scatter_blocks(
      b, g,
      {.at = [&](int u) { return root ? in_slice(block(u)) : out_slice(block(u)); },
       .joined = [](int) { return true; }},
      out_slice(block(g.pos)));
  if (is_pow2(n)) {
    recursive_doubling_allgather(b, g, {.blocks = blocks, .dst = out_slice});
  } else {
    ring_allgather(
        b, g,
        {.first_block = g.pos,
         .dst = [&](int u) { return out_slice(block(u)); },
         .held = [&](int u) -> std::optional<Slice> {
           if (root) return in_slice(block(u));
           return std::nullopt;
         }});
  }
  return std::move(b).finish();
}

}  // namespace plait::coll
