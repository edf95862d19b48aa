// Recursive-halving reduce-scatter: log2(p2) rounds, each sending half of what is left,
// (n-1)/n of the input per rank in all. For a non-power-of-two size the extra ranks fold
// their whole input into an even neighbour first; group member k then stands for the
// original ranks 2k, 2k+1 (k < rem) or k + rem, so its share of the halving is those
// ranks' blocks, and at the end it hands the odd partner its block. Partial sums live in a
// scratch mirror of the input; the input is only read, in place too.
#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

Schedule build_reduce_scatter_halving_doubling(const CollArgs& args) {
  ScheduleBuilder b(args, "halving_doubling");
  const int n = args.size;
  const size_t count = args.count;
  const size_t chunk = b.chunk();
  const Slice all = in_slice({0, static_cast<size_t>(n) * count});
  const Slice out = out_slice({0, count});
  auto block_of = [&](int rank) { return Range{static_cast<size_t>(rank) * count, count}; };
  if (n == 1) {
    b.copy(all, out);
    return std::move(b).finish();
  }
  const Fold fold = fold_to_pow2(rotated_group(n, args.rank, 0));
  if (fold.sits_out) {
    b.send_chunks(fold.partner, all, chunk);
    b.recv_chunks(fold.partner, out, chunk);
    return std::move(b).finish();
  }
  const Slice mirror = b.scratch(all.count);
  auto acc = [&](Range r) { return sub(mirror, r.offset, r.count); };
  bool holds = false;
  if (fold.absorbs) {
    b.recv_then_reduce_chunks(fold.partner, mirror, all, chunk);
    holds = true;
  }
  std::vector<Range> shares;
  for (int k = 0; k < fold.p2; ++k) {
    const bool pair = k < fold.rem;
    const int first = pair ? 2 * k : k + fold.rem;
    shares.push_back({block_of(first).offset, (pair ? 2 : 1) * count});
  }
  recursive_halving(b, fold.inner,
                    {.blocks = shares, .own = in_slice, .acc = acc, .acc_holds_own = holds});
  if (fold.absorbs) b.send_chunks(fold.partner, acc(block_of(args.rank + 1)), chunk);
  b.copy(acc(block_of(args.rank)), out);
  return std::move(b).finish();
}

}  // namespace plait::coll
