// Naive scatter: the root sends each rank its block directly. One step; n-1 messages
// leave the root.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_scatter_naive(const CollArgs& args) {
  ScheduleBuilder b(args, "naive");
  const size_t count = args.count;
  const Slice out = out_slice({0, count});
  if (args.rank != args.root) {
    if (count) b.recv(args.root, out);
    return std::move(b).finish();
  }
  for (int p = 0; p < args.size; ++p) {
    if (p != args.root && count) b.send(p, in_slice({static_cast<size_t>(p) * count, count}));
  }
  // Last, so that in place (the output is the front of the input) rank 0's block has left
  // before the root's own block overwrites it.
  b.copy(in_slice({static_cast<size_t>(args.root) * count, count}), out);
  return std::move(b).finish();
}

}  // namespace plait::coll
