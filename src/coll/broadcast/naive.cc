// Naive broadcast: the root sends the whole vector to every other rank. One step, n-1
// messages leaving the root.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_broadcast_naive(const CollArgs& args) {
  ScheduleBuilder b(args, "naive");
  const Slice out = out_slice({0, args.count});
  if (args.rank != args.root) {
    if (out.count) b.recv(args.root, out);
    return std::move(b).finish();
  }
  const Slice in = in_slice({0, args.count});
  for (int p = 0; p < args.size; ++p) {
    if (p != args.root && in.count) b.send(p, in);
  }
  b.copy(in, out);
  return std::move(b).finish();
}

}  // namespace plait::coll
