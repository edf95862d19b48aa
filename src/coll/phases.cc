#include "coll/phases.h"

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

// ---- ring ----

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

// ---- trees ----

void binomial_reduce(ScheduleBuilder& b, const Group& g, Slice own, Slice acc) {
  const TreeNode t = binomial_node(g.n(), g.pos);
  const size_t chunk = b.chunk();
  bool acc_has_own = same_region(b.where(own), b.where(acc));
  if (t.children.empty()) {
    if (t.parent >= 0) b.send_chunks(g.rank(t.parent), own, chunk);
    else if (!acc_has_own) b.copy(own, acc);
    return;
  }
  const size_t slot = chunk ? std::min(chunk, acc.count) : acc.count;
  for (int child : t.children) {
    if (!acc_has_own) {
      b.recv_then_reduce_chunks(g.rank(child), acc, own, chunk);
      acc_has_own = true;
    } else {
      // One staging ring per child, so children's messages land in parallel while the
      // reductions into acc take their turn.
      StagingRing ring(b, slot, chunk ? 2 : 1);
      recv_staged_reduce_chunks(b, g.rank(child), acc, ring, chunk);
    }
  }
  if (t.parent >= 0) b.send_chunks(g.rank(t.parent), acc, chunk);
}

void binomial_bcast(ScheduleBuilder& b, const Group& g, Slice src, Slice dst) {
  const TreeNode t = binomial_node(g.n(), g.pos);
  const bool in_turn = in_turn_down(b, dst);
  Slice from = dst;
  if (t.parent >= 0) {
    const std::vector<StepId> in = b.recv_chunks(g.rank(t.parent), dst, b.chunk());
    // The parent's last child is its smallest subtree, children.front().
    if (in_turn && binomial_node(g.n(), t.parent).children.front() != g.pos)
      acknowledge(b, g.rank(t.parent), in);
  } else {
    from = src;
  }
  // Largest subtree first: it has the longest way to go.
  std::vector<int> children;
  for (auto it = t.children.rbegin(); it != t.children.rend(); ++it)
    children.push_back(g.rank(*it));
  send_down(b, children, from, in_turn);
  if (t.parent < 0) b.copy(src, dst);
}

bool in_turn_down(const ScheduleBuilder& b, Slice vector) {
  return (b.chunk() == 0 || vector.count <= b.chunk()) && b.acknowledged(vector.count);
}

void send_down(ScheduleBuilder& b, std::span<const int> children, Slice src, bool in_turn) {
  const Slice token{BufferId::kOutput, 0, 0};
  std::optional<StepId> taken;
  for (size_t i = 0; i < children.size(); ++i) {
    if (!in_turn) {
      b.send_chunks(children[i], src, b.chunk());
      continue;
    }
    b.send(children[i], src, taken ? std::span<const StepId>(&*taken, 1)
                                   : std::span<const StepId>());
    if (i + 1 < children.size()) taken = b.recv(children[i], token);
  }
}

void acknowledge(ScheduleBuilder& b, int parent, std::span<const StepId> arrived) {
  b.send(parent, Slice{BufferId::kOutput, 0, 0}, arrived);
}

namespace {

// Calls f(slice) for each maximal run of blocks [first, last) that is contiguous on every
// rank; both ends of a message compute the same runs.
template <typename F>
void for_each_run(const BlockLayout& blocks, int first, int last, F&& f) {
  int u = first;
  while (u < last) {
    Slice run = blocks.at(u);
    int v = u + 1;
    for (; v < last && blocks.joined(v); ++v) run.count += blocks.at(v).count;
    f(run);
    u = v;
  }
}

}  // namespace

void binomial_gather_blocks(ScheduleBuilder& b, const Group& g, const BlockLayout& blocks,
                            Slice own_src) {
  const TreeNode t = binomial_node(g.n(), g.pos);
  const size_t chunk = b.chunk();
  const bool leaf = t.children.empty();
  if (!leaf || t.parent < 0) b.copy(own_src, blocks.at(g.pos));
  for (int child : t.children) {
    const TreeNode c = binomial_node(g.n(), child);
    for_each_run(blocks, child, c.end, [&](Slice run) { b.recv_chunks(g.rank(child), run, chunk); });
  }
  if (t.parent < 0) return;
  if (leaf) {
    b.send_chunks(g.rank(t.parent), own_src, chunk);
  } else {
    for_each_run(blocks, g.pos, t.end,
                 [&](Slice run) { b.send_chunks(g.rank(t.parent), run, chunk); });
  }
}

void binomial_scatter_blocks(ScheduleBuilder& b, const Group& g, const BlockLayout& blocks,
                             Slice own_dst) {
  const TreeNode t = binomial_node(g.n(), g.pos);
  const size_t chunk = b.chunk();
  const bool leaf = t.children.empty();
  if (t.parent >= 0) {
    if (leaf) {
      b.recv_chunks(g.rank(t.parent), own_dst, chunk);
    } else {
      for_each_run(blocks, g.pos, t.end,
                   [&](Slice run) { b.recv_chunks(g.rank(t.parent), run, chunk); });
    }
  }
  for (auto it = t.children.rbegin(); it != t.children.rend(); ++it) {
    const TreeNode c = binomial_node(g.n(), *it);
    for_each_run(blocks, *it, c.end, [&](Slice run) { b.send_chunks(g.rank(*it), run, chunk); });
  }
  if (!leaf || t.parent < 0) b.copy(blocks.at(g.pos), own_dst);
}

// ---- hypercube ----

namespace {

Range span_of(const std::vector<Range>& blocks, int lo, int hi) {
  size_t begin = blocks[static_cast<size_t>(lo)].offset;
  return Range{begin, blocks[static_cast<size_t>(hi - 1)].end() - begin};
}

// The hypercube's messages go in units: the most blocks (a power of two) that one pipelining
// chunk holds, at least one; all of them when nothing is pipelined. Every member computes the
// same from the same blocks.
int unit_blocks(const std::vector<Range>& blocks, size_t chunk) {
  const int p2 = static_cast<int>(blocks.size());
  if (chunk == 0) return p2;
  int u = 1;
  while (u < p2 && span_of(blocks, 0, 2 * u).count <= chunk) u *= 2;
  return u;
}

// The units of blocks [lo, lo + m) (m a power of two, lo a multiple of it) in the order `pos`
// (a position among them) takes them: by (unit xor pos's unit), descending for recursive
// halving (the units it hands on at the next step first, the one it keeps to the end last),
// ascending for recursive doubling (what it has held longest first). Both ends of a message
// order by the receiver's position, so sends and receives pair up. The order is the same for
// every position up to relabelling: a unit waits on the same steps everywhere (ascending
// offsets made the lower half of each pair wait for its partner's last units before it could
// pass any on, and made plait sim unable to replay the pipelined hypercube through one rank).
std::vector<Range> units_in_order(const std::vector<Range>& blocks, int lo, int m, int u, int pos,
                                  bool descending) {
  if (m <= u) return {span_of(blocks, lo, lo + m)};
  const int n = m / u;
  const int mine = pos / u;
  std::vector<Range> out;
  for (int k = 0; k < n; ++k) {
    const int d = descending ? n - 1 - k : k;
    const int unit = (mine & ~(n - 1)) | ((mine & (n - 1)) ^ d);
    out.push_back(span_of(blocks, unit * u, unit * u + u));
  }
  return out;
}

// Whether the hypercube's round of `m` blocks a side starts with a handshake
// (ScheduleBuilder::handshake): no round of the phase is pipelined (its largest, p2/2 blocks a
// side, is one message), and the pair's round moves at least 2 kHandshakeBytes. In a
// pipelined phase a round's units follow the last round's as they are combined, by design,
// and a handshake would hold them back (4 MiB on four 200 Mbit/s hosts: 398 ms with one,
// 263 modelled). Both partners compute the same: the same blocks, the same pair.
bool handshake_round(const ScheduleBuilder& b, const std::vector<Range>& blocks, int pos, int m,
                     int u) {
  const int p2 = static_cast<int>(blocks.size());
  const size_t chunk = b.chunk();
  if (chunk != 0 && (p2 / 2 > u || span_of(blocks, 0, p2 / 2).count > chunk)) return false;
  const int pair = pos & ~(2 * m - 1);
  return span_of(blocks, pair, pair + 2 * m).count * dtype_size(b.args().dtype) >=
         2 * ScheduleBuilder::kHandshakeBytes;
}

}  // namespace

void recursive_halving(ScheduleBuilder& b, const Group& g, const Halving& spec) {
  const int p2 = g.n();
  const size_t chunk = b.chunk();
  int lo = 0, hi = p2;
  bool holds = spec.acc_holds_own;
  std::optional<StagingRing> ring;
  const int u = unit_blocks(spec.blocks, chunk);
  for (int mask = p2 / 2; mask >= 1; mask /= 2) {
    const int partner = g.pos ^ mask;
    const int mid = lo + (hi - lo) / 2;
    const bool upper = (g.pos & mask) != 0;
    const Range keep = upper ? span_of(spec.blocks, mid, hi) : span_of(spec.blocks, lo, mid);
    std::optional<StepId> ready;
    if (mask != p2 / 2 && handshake_round(b, spec.blocks, g.pos, mask, u))
      ready = b.handshake(g.rank(partner), b.last_step());
    const int give_lo = upper ? lo : mid;
    for (const Range& give : units_in_order(spec.blocks, give_lo, mask, u, partner, true)) {
      const Slice from = holds ? spec.acc(give) : spec.own(give);
      if (ready) b.send(g.rank(partner), from, std::span<const StepId>(&*ready, 1));
      else b.send_chunks(g.rank(partner), from, chunk);
    }
    if (holds && !ring) {
      // Later rounds keep half as much, so the first round that stages sizes the ring.
      ring.emplace(b, chunk ? std::min(chunk, keep.count) : keep.count, chunk ? 2 : 1);
    }
    for (const Range& unit : units_in_order(spec.blocks, upper ? mid : lo, mask, u, g.pos, true)) {
      if (holds)
        recv_reduce_chunks(b, g.rank(partner), spec.acc(unit), *ring, chunk);
      else
        b.recv_then_reduce_chunks(g.rank(partner), spec.acc(unit), spec.own(unit), chunk);
    }
    holds = true;
    if (upper) lo = mid; else hi = mid;
  }
  if (!holds) b.copy(spec.own(spec.blocks[0]), spec.acc(spec.blocks[0]));
}

void recursive_doubling_allgather(ScheduleBuilder& b, const Group& g, const Doubling& spec) {
  const int p2 = g.n();
  const size_t chunk = b.chunk();
  const Range mine = spec.blocks[static_cast<size_t>(g.pos)];
  if (spec.own_src) b.copy(*spec.own_src, spec.dst(mine));
  const int u = unit_blocks(spec.blocks, chunk);
  for (int mask = 1; mask < p2; mask <<= 1) {
    const int partner = g.pos ^ mask;
    const int base = g.pos & ~(mask - 1);
    const int pbase = partner & ~(mask - 1);
    std::optional<StepId> ready;
    if (mask != 1 && handshake_round(b, spec.blocks, g.pos, mask, u))
      ready = b.handshake(g.rank(partner), b.last_step());
    if (mask == 1 && spec.own_src) {
      b.send_chunks(g.rank(partner), *spec.own_src, chunk);
    } else {
      for (const Range& unit : units_in_order(spec.blocks, base, mask, u, g.pos, false)) {
        if (ready) b.send(g.rank(partner), spec.dst(unit), std::span<const StepId>(&*ready, 1));
        else b.send_chunks(g.rank(partner), spec.dst(unit), chunk);
      }
    }
    for (const Range& unit : units_in_order(spec.blocks, pbase, mask, u, partner, false))
      b.recv_chunks(g.rank(partner), spec.dst(unit), chunk);
  }
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
