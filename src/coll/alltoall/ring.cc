// Pairwise-exchange alltoall(v): in step i rank r sends to r+i and receives from r-i, and
// step i starts only when step i-1's transfers are done. Those step-to-step dependencies
// are not data hazards, they are the algorithm: one peer pair at a time keeps every link
// carrying one message instead of n-1 colliding ones (large messages, oversubscribed
// networks). In place, blocks land in scratch and move once the block they overwrite is sent.
#include "coll/builders.h"
#include "coll/phases.h"

namespace plait::coll {

Schedule build_alltoallv_ring(const CollArgs& args) {
  ScheduleBuilder b(args, "ring");
  const std::vector<Range> to = send_blocks(args);
  const std::vector<Range> from = rank_blocks(args);
  const int n = args.size;
  const int r = args.rank;
  b.copy(in_slice(to[static_cast<size_t>(r)]), out_slice(from[static_cast<size_t>(r)]));
  std::vector<StepId> previous;
  std::vector<std::pair<Slice, Slice>> moves;
  for (int i = 1; i < n; ++i) {
    const int dst_rank = wrap(r + i, n);
    const int src_rank = wrap(r - i, n);
    const Range out_block = to[static_cast<size_t>(dst_rank)];
    const Range in_block = from[static_cast<size_t>(src_rank)];
    std::vector<StepId> current;
    if (out_block.count) current.push_back(b.send(dst_rank, in_slice(out_block), previous));
    if (in_block.count) {
      Slice land = out_slice(in_block);
      if (args.in_place) {
        land = b.scratch(in_block.count);
        moves.push_back({land, out_slice(in_block)});
      }
      current.push_back(b.recv(src_rank, land, previous));
    }
    if (!current.empty()) previous = std::move(current);
  }
  for (const auto& [slot, dst] : moves) b.copy(slot, dst);
  return std::move(b).finish();
}

Schedule build_alltoall_ring(const CollArgs& args) { return build_alltoallv_ring(args); }

}  // namespace plait::coll
