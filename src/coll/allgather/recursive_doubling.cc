// Recursive-doubling allgather: ceil(log2 n) rounds, the amount exchanged doubling each
// round; latency-optimal and moving (n-1)/n of the output per rank. For a power-of-two
// size it is the classic hypercube exchange. Other sizes use Bruck's scheme in place: in
// round i rank r sends the min(2^i, n - 2^i) blocks it holds, starting at its own, to rank
// r - 2^i, and receives the next ones from r + 2^i. Block ranges that wrap past the end of
// the output go as two messages, split at the same block on both sides, so no final
// rotation pass is needed.
#include <algorithm>

#include "coll/schedule/phases.h"
#include "coll/select/builders.h"

namespace plait::coll {

namespace {

// Blocks [first, first + n_blocks) modulo `size`, as at most two slices of the output.
template <typename F>
void for_each_wrapped(int first, int n_blocks, int size, size_t count, F&& f) {
  const int head = std::min(n_blocks, size - first);
  f(out_slice({static_cast<size_t>(first) * count, static_cast<size_t>(head) * count}));
  if (head < n_blocks) f(out_slice({0, static_cast<size_t>(n_blocks - head) * count}));
}

}  // namespace

Schedule build_allgather_recursive_doubling(const CollArgs& args) {
  ScheduleBuilder b(args, "recursive_doubling");
  const int n = args.size;
  const int r = args.rank;
  const size_t count = args.count;
  const size_t chunk = b.chunk();
  const Slice own = in_slice({0, count});
  const Range mine{static_cast<size_t>(r) * count, count};
  if (is_pow2(n)) {
    std::vector<Range> blocks;
    for (int k = 0; k < n; ++k) blocks.push_back({static_cast<size_t>(k) * count, count});
    recursive_doubling_allgather(
        b, rotated_group(n, r, 0),
        {.blocks = blocks, .dst = out_slice,
         .own_src = args.in_place ? std::nullopt : std::optional<Slice>(own)});
    return std::move(b).finish();
  }
  b.copy(own, out_slice(mine));
  for (int dist = 1; dist < n; dist <<= 1) {
    const int n_blocks = std::min(dist, n - dist);
    if (dist == 1) {
      b.send_chunks(wrap(r - dist, n), own, chunk);  // need not wait for the copy above
    } else {
      for_each_wrapped(r, n_blocks, n, count,
                       [&](Slice s) { b.send_chunks(wrap(r - dist, n), s, chunk); });
    }
    for_each_wrapped(wrap(r + dist, n), n_blocks, n, count,
                     [&](Slice s) { b.recv_chunks(wrap(r + dist, n), s, chunk); });
  }
  return std::move(b).finish();
}

}  // namespace plait::coll
