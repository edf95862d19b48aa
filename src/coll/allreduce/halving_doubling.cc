// Rabenseifner's allreduce: recursive-halving reduce-scatter, then recursive-doubling
// allgather, over a power-of-two group. Bandwidth-optimal like the ring but in 2 log2(n)
// steps. A non-power-of-two size first folds its extra ranks into neighbours (each odd rank
// below 2*(n - p2) hands its vector to the even rank below it) and hands them the result at
// the end: two more full-vector steps for those pairs.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_allreduce_halving_doubling(const CollArgs& args) {
  ScheduleBuilder b(args, "halving_doubling");
  const size_t count = args.count;
  const size_t chunk = b.chunk();
  const Slice own = in_slice({0, count});
  const Slice acc = out_slice({0, count});
  const Fold fold = fold_to_pow2(rotated_group(args.size, args.rank, 0));
  bool holds = args.in_place;
  if (fold.sits_out) {
    b.send_chunks(fold.partner, own, chunk);
    b.recv_chunks(fold.partner, acc, chunk);
    return std::move(b).finish();
  }
  if (fold.absorbs) {
    StagingRing ring(b, chunk ? std::min(chunk, count) : count, chunk ? 2 : 1);
    holds = recv_combine_chunks(b, fold.partner, own, acc, holds, ring, chunk);
  }
  std::vector<Range> blocks;
  for (int k = 0; k < fold.p2; ++k) blocks.push_back(even_block(count, fold.p2, k));
  auto own_of = [&](Range r) { return holds ? out_slice(r) : in_slice(r); };
  recursive_halving(b, fold.inner,
                    {.blocks = blocks, .own = own_of, .acc = out_slice, .acc_holds_own = holds});
  recursive_doubling_allgather(b, fold.inner, {.blocks = blocks, .dst = out_slice});
  if (fold.absorbs) b.send_chunks(fold.partner, acc, chunk);
  return std::move(b).finish();
}

}  // namespace plait::coll
