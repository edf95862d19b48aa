// Reduce by recursive halving then binomial gather (Rabenseifner's reduce): the reduce-
// scatter leaves each of the p2 = floor_pow2(n) members one reduced block, and a binomial
// gather brings the blocks to the root. Ranks are numbered relative to the root and the
// fold pairs odd with even positions, so the root (position 0) always stays in the
// power-of-two group.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_reduce_halving_doubling(const CollArgs& args) {
  ScheduleBuilder b(args, "halving_doubling");
  const size_t count = args.count;
  const size_t chunk = b.chunk();
  const Slice own = in_slice({0, count});
  const Slice acc = out_slice({0, count});
  const Fold fold = fold_to_pow2(rotated_group(args.size, args.rank, args.root));
  if (fold.sits_out) {
    b.send_chunks(fold.partner, own, chunk);
    return std::move(b).finish();
  }
  bool holds = args.in_place;
  if (fold.absorbs) {
    StagingRing ring(b, chunk ? std::min(chunk, count) : count, chunk ? 2 : 1);
    holds = recv_combine_chunks(b, fold.partner, own, acc, holds, ring, chunk);
  }
  std::vector<Range> blocks;
  for (int k = 0; k < fold.p2; ++k) blocks.push_back(even_block(count, fold.p2, k));
  auto own_of = [&](Range r) { return holds ? out_slice(r) : in_slice(r); };
  recursive_halving(b, fold.inner,
                    {.blocks = blocks, .own = own_of, .acc = out_slice, .acc_holds_own = holds});
  auto at = [&](int k) { return out_slice(blocks[static_cast<size_t>(k)]); };
  binomial_gather_blocks(b, fold.inner, {.at = at, .joined = [](int) { return true; }},
                         at(fold.inner.pos));
  return std::move(b).finish();
}

}  // namespace plait::coll
