// Recursive-doubling allreduce: in round i each rank swaps its whole partial vector with
// the rank 2^i away and reduces. log2(n) rounds: latency-optimal, but every round moves the
// full vector, so it is for small messages. Non-powers of two fold their extra ranks in
// first (see halving_doubling.cc). Partners combine the same two operands in each round,
// so every rank ends with bit-identical results.
#include "coll/builders.h"
#include "coll/phases.h"

namespace plait::coll {

Schedule build_allreduce_recursive_doubling(const CollArgs& args) {
  ScheduleBuilder b(args, "recursive_doubling");
  const size_t count = args.count;
  const size_t chunk = b.chunk();
  const Slice own = in_slice({0, count});
  const Slice acc = out_slice({0, count});
  const Fold fold = fold_to_pow2(rotated_group(args.size, args.rank, 0));
  if (fold.sits_out) {
    b.send_chunks(fold.partner, own, chunk);
    b.recv_chunks(fold.partner, acc, chunk);
    return std::move(b).finish();
  }
  bool holds = args.in_place;
  // The partner's vector arrives in staging while ours is still being sent from acc; one
  // staging area (or two chunk slots) suffices because a round's receive cannot start
  // before the partner finished the previous round anyway.
  StagingRing ring(b, chunk ? std::min(chunk, count) : count, chunk ? 2 : 1);
  auto exchange = [&](int peer) {
    b.send_chunks(peer, holds ? acc : own, chunk);
    holds = recv_combine_chunks(b, peer, own, acc, holds, ring, chunk);
  };
  if (fold.absorbs) holds = recv_combine_chunks(b, fold.partner, own, acc, holds, ring, chunk);
  for (int mask = 1; mask < fold.p2; mask <<= 1) exchange(fold.inner.rank(fold.inner.pos ^ mask));
  if (!holds) b.copy(own, acc);
  if (fold.absorbs) b.send_chunks(fold.partner, acc, chunk);
  return std::move(b).finish();
}

}  // namespace plait::coll
