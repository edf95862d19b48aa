// Pairwise-exchange alltoall(v): in step i rank r sends to r+i and receives from r-i, and
// step i starts only when step i-1's transfers are done. Those step-to-step dependencies
// are not data hazards, they are the algorithm: one peer pair at a time keeps every link
// carrying one message instead of n-1 colliding ones (large messages, oversubscribed
// networks). In place, blocks land in scratch and move once the block they overwrite is sent.
//
// An eager send completes once the transport has its bytes, not when they arrive, so "step
// i-1's transfers are done" let a rank post its next message while its last was still
// queued: two steps' messages shared its link, a receiver fell behind, and a launch could run
// in a slower mode for good (4 MiB on eight 200 Mbit/s namespace hosts: 154 ms in one launch,
// 285 in another). So a message from kHandshakeBytes up to TCP's eager threshold (2 MiB) is
// acknowledged: its receiver sends a zero-byte token back once it is in, and the sender's
// next step waits for it, as if its send completed on arrival. From the threshold a send is a
// rendezvous, whose data goes only once the receiver is ready, and a token would only add a
// trip through a busy queue (16 MiB on four 1 Gbit/s hosts, 4 MiB messages: 118 ms without,
// 128 with): ScheduleBuilder::acknowledged.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_alltoallv_ring(const CollArgs& args) {
  ScheduleBuilder b(args, "ring");
  const std::vector<Range> to = send_blocks(args);
  const std::vector<Range> from = rank_blocks(args);
  const int n = args.size;
  const int r = args.rank;
  b.copy(in_slice(to[static_cast<size_t>(r)]), out_slice(from[static_cast<size_t>(r)]));
  const Slice token{BufferId::kOutput, 0, 0};
  auto acknowledged = [&](const Range& block) { return b.acknowledged(block.count); };
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
      const StepId in = b.recv(src_rank, land, previous);
      current.push_back(in);
      // Data before acknowledgements at both ends: with dst == src (i == n/2) the pair's
      // messages must pair up in the same order.
      if (acknowledged(in_block)) b.send(src_rank, token, std::span<const StepId>(&in, 1));
    }
    if (acknowledged(out_block)) current.push_back(b.recv(dst_rank, token));
    if (!current.empty()) previous = std::move(current);
  }
  for (const auto& [slot, dst] : moves) b.copy(slot, dst);
  return std::move(b).finish();
}

Schedule build_alltoall_ring(const CollArgs& args) { return build_alltoallv_ring(args); }

}  // namespace plait::coll
