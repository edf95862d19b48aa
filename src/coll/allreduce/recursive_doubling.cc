// Recursive-doubling allreduce: in round i each rank swaps its whole partial vector with
// the rank 2^i away and reduces. log2(n) rounds: latency-optimal, but every round moves the
// full vector, so it is for small messages. Non-powers of two fold their extra ranks in
// first (see halving_doubling.cc). Partners combine the same two operands in each round,
// so every rank ends with bit-identical results.
//
// A round whose vector goes as one message of 256 KiB or more starts with a handshake
// (ScheduleBuilder::handshake): a rank sends its next partner a token once its previous round
// is in, and sends its vector once the partner's token is in, so no message lands on a link
// still busy with the partner's previous round. It costs a message latency a round, small
// beside a transfer that long. Pipelined rounds (several chunks) go without: chunk i of a
// round leaves as soon as chunk i of the one before is combined, by design.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

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
  const bool one_piece = chunk == 0 || count <= chunk;
  const bool handshakes =
      one_piece && count * dtype_size(args.dtype) >= ScheduleBuilder::kHandshakeBytes;
  auto exchange = [&](int peer, bool first) {
    const Slice src = holds ? acc : own;
    if (handshakes && !first) {
      const StepId ready[] = {b.handshake(peer, b.last_step())};
      b.send(peer, src, ready);
    } else {
      b.send_chunks(peer, src, chunk);
    }
    holds = recv_combine_chunks(b, peer, own, acc, holds, ring, chunk);
  };
  if (fold.absorbs) holds = recv_combine_chunks(b, fold.partner, own, acc, holds, ring, chunk);
  for (int mask = 1; mask < fold.p2; mask <<= 1)
    exchange(fold.inner.rank(fold.inner.pos ^ mask), mask == 1);
  if (!holds) b.copy(own, acc);
  if (fold.absorbs) b.send_chunks(fold.partner, acc, chunk);
  return std::move(b).finish();
}

}  // namespace plait::coll
