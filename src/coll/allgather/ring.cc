// Ring allgather(v): in step s rank r passes block r-s to r+1 and receives block r-s-1 from
// r-1. n-1 steps, each link carries every block once: bandwidth-optimal. With chunk_count
// set a block's chunks are forwarded as they arrive.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_allgatherv_ring(const CollArgs& args) {
  ScheduleBuilder b(args, "ring");
  const std::vector<Range> blocks = rank_blocks(args);
  const Range mine = blocks[static_cast<size_t>(args.rank)];
  const Slice own = in_slice({0, mine.count});
  auto dst = [&](int k) { return out_slice(blocks[static_cast<size_t>(k)]); };
  ring_allgather(b, rotated_group(args.size, args.rank, 0),
                 {.first_block = args.rank,
                  .dst = dst,
                  .held = [&](int k) -> std::optional<Slice> {
                    if (k == args.rank) return own;
                    return std::nullopt;
                  }});
  b.copy(own, out_slice(mine));
  return std::move(b).finish();
}

Schedule build_allgather_ring(const CollArgs& args) { return build_allgatherv_ring(args); }

}  // namespace plait::coll
