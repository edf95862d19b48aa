#include "coll/schedule/phases.h"

#include <algorithm>

namespace plait::coll {

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

}  // namespace plait::coll
