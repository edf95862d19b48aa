// Ring allreduce: a ring reduce-scatter (after n-1 steps rank r owns block r+1, fully
// reduced) followed by a ring allgather of the owned blocks. Bandwidth-optimal:
// 2(n-1)/n of the vector crosses each link, in 2(n-1) steps. Blocks differ by at most one
// element when count % size != 0; empty blocks (count < size) send nothing. With
// chunk_count set, each block moves in chunks, and chunk i is forwarded as soon as it is
// reduced, while chunk i+1 is still arriving.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_allreduce_ring(const CollArgs& args) {
  ScheduleBuilder b(args, "ring");
  const int n = args.size;
  if (n == 1) {
    b.copy(in_slice({0, args.count}), out_slice({0, args.count}));
    return std::move(b).finish();
  }
  const Group ring = rotated_group(n, args.rank, 0);
  auto block = [&](int k) { return even_block(args.count, n, k); };
  const int owned = wrap(args.rank + 1, n);
  ring_reduce_scatter(b, ring,
                      {.final_block = owned,
                       .own = [&](int k) { return in_slice(block(k)); },
                       .acc = [&](int k, int) { return out_slice(block(k)); },
                       .acc_holds_own = args.in_place});
  ring_allgather(b, ring,
                 {.first_block = owned,
                  .dst = [&](int k) { return out_slice(block(k)); },
                  .held = nullptr});
  return std::move(b).finish();
}

}  // namespace plait::coll
