// Ring reduce-scatter(v): in step s rank r sends its partial sum of block r-s-1 to r+1 and
// adds what r-1 sends into block r-s-2; after n-1 steps it holds block r, reduced. Partial
// sums live in two scratch blocks used alternately (a block is received, reduced, sent
// on, then its slot is free again), and the last one lands straight in the output. The
// input is only read, in place too: the in-place result is copied to the front at the end.
#include <algorithm>

#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_reduce_scatterv_ring(const CollArgs& args) {
  ScheduleBuilder b(args, "ring");
  const int n = args.size;
  const std::vector<Range> blocks = rank_blocks(args);
  const Range mine = blocks[static_cast<size_t>(args.rank)];
  const Slice out = out_slice({0, mine.count});
  if (n == 1) {
    b.copy(in_slice(mine), out);
    return std::move(b).finish();
  }
  size_t biggest = 0;
  for (const Range& r : blocks) biggest = std::max(biggest, r.count);
  const Slice slots[2] = {b.scratch(biggest), b.scratch(biggest)};
  auto acc = [&](int k, int step) {
    if (step == n - 2 && !args.in_place) return out;
    return sub(slots[step % 2], 0, blocks[static_cast<size_t>(k)].count);
  };
  ring_reduce_scatter(b, rotated_group(n, args.rank, 0),
                      {.final_block = args.rank,
                       .own = [&](int k) { return in_slice(blocks[static_cast<size_t>(k)]); },
                       .acc = acc,
                       .acc_holds_own = false});
  if (args.in_place) b.copy(acc(args.rank, n - 2), out);
  return std::move(b).finish();
}

Schedule build_reduce_scatter_ring(const CollArgs& args) {
  return build_reduce_scatterv_ring(args);
}

}  // namespace plait::coll
