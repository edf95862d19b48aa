// The buffers of a collective call as its schedules see them: the element layout of each
// op's input and output, blocks and ranges, the checks that arguments describe a call, and
// how a slice resolves to physical memory once in-place aliasing is taken into account.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "coll/schedule/schedule.h"

namespace plait::coll {

struct Range {
  size_t offset = 0;
  size_t count = 0;
  size_t end() const { return offset + count; }
};

// Block i of `count` elements cut into `parts` nearly equal blocks in order; the first
// count % parts blocks are one element longer. Empty blocks when count < parts.
Range even_block(size_t count, int parts, int i);

// a mod n in [0, n), for ring and relative-rank arithmetic with negative a.
inline int wrap(int a, int n) { return ((a % n) + n) % n; }

inline bool is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }
// Largest power of two <= n (n >= 1).
int floor_pow2(int n);
// ceil(log2(n)) for n >= 1.
int ceil_log2(int n);

inline Slice sub(Slice s, size_t offset, size_t count) {
  return Slice{s.buffer, s.offset + offset, count};
}
inline Slice in_slice(Range r) { return Slice{BufferId::kInput, r.offset, r.count}; }
inline Slice out_slice(Range r) { return Slice{BufferId::kOutput, r.offset, r.count}; }

// The element extents an op's buffers have on one rank (schedule.h spells out the layouts).
// In place there is one buffer of buffer_count() elements; kOutput starts at its element 0
// and kInput at input_offset: the rank's own block for allgather(v) and for gather (as in
// MPI and as the communicator passes it: the root's contribution already sits in its slot
// of the output), 0 for every other op.
// Ranks that have no input for an op (non-roots of broadcast and scatter) get
// input_count 0, and non-roots of gather output_count 0, so a schedule touching them fails
// the bounds check. Reduce gives every rank an output (the communicator supplies one).
struct BufferLayout {
  size_t input_count = 0;
  size_t output_count = 0;
  size_t input_offset = 0;
  bool in_place = false;
  size_t buffer_count() const {
    return in_place ? std::max(output_count, input_offset + input_count) : output_count;
  }
};
BufferLayout layout_of(const CollArgs& args);

// Rank p's block of the per-rank layout: [p*count, count) for the uniform ops, counts and
// displs for the v-variants. For alltoall(v) it is the receive side; send_blocks gives the
// send side (send_counts / send_displs).
std::vector<Range> rank_blocks(const CollArgs& args);
std::vector<Range> send_blocks(const CollArgs& args);
// The elements the blocks cover, as sorted, disjoint, non-adjacent ranges.
std::vector<Range> covered_runs(std::vector<Range> blocks);

// Throws plait::Error (invalid usage) when args cannot describe a call: rank or root out of
// range, v-variant vectors or host_of of the wrong length, a negative host index.
void validate_args(const CollArgs& args);

// A slice after in-place aliasing is resolved: which physical buffer, which elements.
enum class PhysBuffer : uint8_t { kOutput, kInput, kScratch };
struct Region {
  PhysBuffer buffer = PhysBuffer::kOutput;
  size_t begin = 0;
  size_t end = 0;
  bool empty() const { return begin == end; }
};
Region resolve(const BufferLayout& layout, Slice s);
inline bool overlap(const Region& a, const Region& b) {
  return a.buffer == b.buffer && a.begin < b.end && b.begin < a.end;
}
inline bool same_region(const Region& a, const Region& b) {
  return a.buffer == b.buffer && a.begin == b.begin && a.end == b.end;
}

}  // namespace plait::coll
