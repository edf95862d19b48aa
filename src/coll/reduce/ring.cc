// Ring reduce: a ring reduce-scatter (rank r ends owning block r+1, reduced), then every
// rank sends its block to the root. (n-1)/n of the vector per link in the reduce-scatter,
// and the root takes in (n-1)/n of it at the end: bandwidth-friendly for large vectors.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_reduce_ring(const CollArgs& args) {
  ScheduleBuilder b(args, "ring");
  const int n = args.size;
  if (n == 1) {
    b.copy(in_slice({0, args.count}), out_slice({0, args.count}));
    return std::move(b).finish();
  }
  auto block = [&](int k) { return even_block(args.count, n, k); };
  const int owned = wrap(args.rank + 1, n);
  ring_reduce_scatter(b, rotated_group(n, args.rank, 0),
                      {.final_block = owned,
                       .own = [&](int k) { return in_slice(block(k)); },
                       .acc = [&](int k, int) { return out_slice(block(k)); },
                       .acc_holds_own = args.in_place});
  if (args.rank != args.root) {
    b.send_chunks(args.root, out_slice(block(owned)), b.chunk());
    return std::move(b).finish();
  }
  for (int k = 0; k < n; ++k) {
    if (k != owned) b.recv_chunks(wrap(k - 1, n), out_slice(block(k)), b.chunk());
  }
  return std::move(b).finish();
}

}  // namespace plait::coll
