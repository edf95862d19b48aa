// Naive alltoall(v): every send and every receive is posted at once. One step; n-1
// messages each way per rank, all competing for the links at the same time. In place,
// blocks arrive in scratch and move into the buffer once the block they overwrite is sent.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_alltoallv_naive(const CollArgs& args) {
  ScheduleBuilder b(args, "naive");
  const std::vector<Range> to = send_blocks(args);
  const std::vector<Range> from = rank_blocks(args);
  const int r = args.rank;
  // Each rank starts with its right-hand neighbour: no rank is everyone's first target.
  for (int k = 1; k < args.size; ++k) {
    const int p = (r + k) % args.size;
    if (to[static_cast<size_t>(p)].count) b.send(p, in_slice(to[static_cast<size_t>(p)]));
  }
  std::vector<std::pair<Slice, Slice>> moves;  // in place: (landing slot, destination)
  for (int p = 0; p < args.size; ++p) {
    const Range block = from[static_cast<size_t>(p)];
    if (p == r || block.count == 0) continue;
    if (args.in_place) {
      Slice slot = b.scratch(block.count);
      b.recv(p, slot);
      moves.push_back({slot, out_slice(block)});
    } else {
      b.recv(p, out_slice(block));
    }
  }
  b.copy(in_slice(to[static_cast<size_t>(r)]), out_slice(from[static_cast<size_t>(r)]));
  for (const auto& [slot, dst] : moves) b.copy(slot, dst);
  return std::move(b).finish();
}

Schedule build_alltoall_naive(const CollArgs& args) { return build_alltoallv_naive(args); }

}  // namespace plait::coll
