#include "coll/schedule/phases.h"

#include <algorithm>

namespace plait::coll {

Group rotated_group(int size, int rank, int root) {
  Group g;
  g.ranks.resize(static_cast<size_t>(size));
  for (int p = 0; p < size; ++p) g.ranks[static_cast<size_t>(p)] = (p + root) % size;
  g.pos = wrap(rank - root, size);
  return g;
}

Fold fold_to_pow2(const Group& g) {
  Fold f;
  const int n = g.n();
  f.p2 = floor_pow2(n);
  f.rem = n - f.p2;
  const int pos = g.pos;
  if (pos < 2 * f.rem) {
    f.sits_out = pos % 2 == 1;
    f.absorbs = !f.sits_out;
    f.partner = g.rank(f.sits_out ? pos - 1 : pos + 1);
  }
  f.inner.ranks.resize(static_cast<size_t>(f.p2));
  for (int k = 0; k < f.p2; ++k) {
    f.inner.ranks[static_cast<size_t>(k)] = g.rank(k < f.rem ? 2 * k : k + f.rem);
  }
  f.inner.pos = f.sits_out ? -1 : (pos < 2 * f.rem ? pos / 2 : pos - f.rem);
  return f;
}

TreeNode binomial_node(int n, int pos) {
  TreeNode t;
  int mask = 1;
  for (; mask < n; mask <<= 1) {
    if (pos & mask) {
      t.parent = pos - mask;
      break;
    }
    if (pos + mask < n) t.children.push_back(pos + mask);
  }
  t.end = std::min(pos + mask, n);
  return t;
}

// ---- allreduce among a group ----

void ring_allreduce_in_place(ScheduleBuilder& b, const Group& g, Slice data) {
  const int n = g.n();
  if (n == 1) return;
  auto block = [&](int k) {
    const Range r = even_block(data.count, n, k);
    return sub(data, r.offset, r.count);
  };
  // Any final block of the form pos + c lines the ring up; pos keeps it simple.
  ring_reduce_scatter(b, g,
                      {.final_block = g.pos,
                       .own = block,
                       .acc = [&](int k, int) { return block(k); },
                       .acc_holds_own = true});
  ring_allgather(b, g, {.first_block = g.pos, .dst = block, .held = nullptr});
}

void recursive_doubling_allreduce_in_place(ScheduleBuilder& b, const Group& g, Slice data) {
  if (g.n() == 1) return;
  const size_t chunk = b.chunk();
  const Fold fold = fold_to_pow2(g);
  if (fold.sits_out) {
    b.send_chunks(fold.partner, data, chunk);
    b.recv_chunks(fold.partner, data, chunk);
    return;
  }
  StagingRing ring(b, chunk ? std::min(chunk, data.count) : data.count, chunk ? 2 : 1);
  if (fold.absorbs) recv_staged_reduce_chunks(b, fold.partner, data, ring, chunk);
  for (int mask = 1; mask < fold.p2; mask <<= 1) {
    const int peer = fold.inner.rank(fold.inner.pos ^ mask);
    b.send_chunks(peer, data, chunk);
    recv_staged_reduce_chunks(b, peer, data, ring, chunk);
  }
  if (fold.absorbs) b.send_chunks(fold.partner, data, chunk);
}

// ---- in-order reduction ----

void reduce_in_order(ScheduleBuilder& b, std::vector<Contribution> parts, Slice target) {
  if (parts.empty() || target.count == 0) return;
  const Region t = b.where(target);
  for (size_t k = 0; k < parts.size(); ++k) {
    Contribution& p = parts[k];
    if (p.peer >= 0) continue;
    Region r = b.where(p.local);
    if (overlap(r, t) && !(k == 0 && same_region(r, t))) {
      Slice saved = b.scratch(p.local.count);
      b.copy(p.local, saved);
      p.local = saved;
    }
  }
  for (size_t k = 0; k < parts.size(); ++k) {
    Contribution& p = parts[k];
    if (p.peer < 0) continue;
    if (k == 0) {
      b.recv(p.peer, target);
      p.local = target;
    } else {
      p.local = b.scratch(target.count);
      b.recv(p.peer, p.local);
    }
  }
  b.copy(parts[0].local, target);
  for (size_t k = 1; k < parts.size(); ++k) b.reduce(parts[k].local, target);
}

}  // namespace plait::coll
