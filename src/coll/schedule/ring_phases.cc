#include "coll/schedule/phases.h"

#include <algorithm>

namespace plait::coll {

void ring_reduce_scatter(ScheduleBuilder& b, const Group& g, const RingReduceScatter& spec) {
  const int n = g.n();
  if (n == 1) return;
  const int next = g.rank(wrap(g.pos + 1, n));
  const int prev = g.rank(wrap(g.pos - 1, n));
  const size_t chunk = b.chunk();
  std::optional<StagingRing> ring;
  if (spec.acc_holds_own) {
    size_t biggest = 0;
    for (int k = 0; k < n; ++k) biggest = std::max(biggest, spec.own(k).count);
    ring.emplace(b, chunk ? std::min(chunk, biggest) : biggest);
  }
  for (int s = 0; s < n - 1; ++s) {
    const int sb = wrap(spec.final_block - 1 - s, n);
    const int rb = wrap(spec.final_block - 2 - s, n);
    b.send_chunks(next, s == 0 ? spec.own(sb) : spec.acc(sb, s - 1), chunk);
    Slice acc = spec.acc(rb, s);
    if (spec.acc_holds_own) {
      recv_reduce_chunks(b, prev, acc, *ring, chunk);
    } else {
      b.recv_then_reduce_chunks(prev, acc, spec.own(rb), chunk);
    }
  }
}

void ring_allgather(ScheduleBuilder& b, const Group& g, const RingAllgather& spec) {
  const int n = g.n();
  if (n == 1) return;
  const int next = g.rank(wrap(g.pos + 1, n));
  const int prev = g.rank(wrap(g.pos - 1, n));
  for (int s = 0; s < n - 1; ++s) {
    const int sb = wrap(spec.first_block - s, n);
    const int rb = wrap(spec.first_block - s - 1, n);
    std::optional<Slice> held = spec.held ? spec.held(sb) : std::nullopt;
    b.send_chunks(next, held ? *held : spec.dst(sb), b.chunk());
    b.recv_chunks(prev, spec.dst(rb), b.chunk());
  }
}

}  // namespace plait::coll
