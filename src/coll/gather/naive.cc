// Naive gather: every rank sends its block straight to the root. One step; the root
// receives n-1 messages at once.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_gather_naive(const CollArgs& args) {
  ScheduleBuilder b(args, "naive");
  const size_t count = args.count;
  const Slice own = in_slice({0, count});
  if (args.rank != args.root) {
    if (count) b.send(args.root, own);
    return std::move(b).finish();
  }
  // Nothing in place, where the root's block already is in its slot.
  b.copy(own, out_slice({static_cast<size_t>(args.root) * count, count}));
  for (int p = 0; p < args.size; ++p) {
    if (p != args.root && count) b.recv(p, out_slice({static_cast<size_t>(p) * count, count}));
  }
  return std::move(b).finish();
}

}  // namespace plait::coll
