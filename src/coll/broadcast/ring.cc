// Chain broadcast: the vector flows from the root around the ring, each rank passing it on
// to the next. Unchunked that is n-1 full-vector steps in sequence; with chunk_count set
// it becomes a pipeline in which every link is busy at once, taking about
// (n - 2 + chunks) chunk times: close to one vector time for large messages.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_broadcast_ring(const CollArgs& args) {
  ScheduleBuilder b(args, "ring");
  const Group g = rotated_group(args.size, args.rank, args.root);
  const Slice out = out_slice({0, args.count});
  const bool last = g.pos == g.n() - 1;
  if (g.pos == 0) {
    const Slice in = in_slice({0, args.count});
    if (!last) b.send_chunks(g.rank(1), in, b.chunk());
    b.copy(in, out);
    return std::move(b).finish();
  }
  b.recv_chunks(g.rank(g.pos - 1), out, b.chunk());
  if (!last) b.send_chunks(g.rank(g.pos + 1), out, b.chunk());
  return std::move(b).finish();
}

}  // namespace plait::coll
