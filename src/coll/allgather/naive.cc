// Naive allgather(v): every rank sends its block to every other rank at once. One step,
// n-1 messages in and out per rank.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_allgatherv_naive(const CollArgs& args) {
  ScheduleBuilder b(args, "naive");
  const std::vector<Range> blocks = rank_blocks(args);
  const Range mine = blocks[static_cast<size_t>(args.rank)];
  const Slice own = in_slice({0, mine.count});
  // Each rank starts with its right-hand neighbour: no rank is everyone's first target.
  for (int k = 1; k < args.size && own.count; ++k) b.send((args.rank + k) % args.size, own);
  for (int p = 0; p < args.size; ++p) {
    const Range r = blocks[static_cast<size_t>(p)];
    if (p != args.rank && r.count) b.recv(p, out_slice(r));
  }
  b.copy(own, out_slice(mine));
  return std::move(b).finish();
}

Schedule build_allgather_naive(const CollArgs& args) { return build_allgatherv_naive(args); }

}  // namespace plait::coll
