#include "coll/schedule/layout.h"

#include <algorithm>
#include <numeric>

#include "plait/error.h"

namespace plait::coll {

Range even_block(size_t count, int parts, int i) {
  size_t p = static_cast<size_t>(parts);
  size_t idx = static_cast<size_t>(i);
  size_t base = count / p;
  size_t extra = count % p;
  return Range{idx * base + std::min(idx, extra), base + (idx < extra ? 1 : 0)};
}

int floor_pow2(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

int ceil_log2(int n) {
  int l = 0;
  while ((1 << l) < n) ++l;
  return l;
}

namespace {

size_t extent(const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  size_t e = 0;
  for (size_t i = 0; i < counts.size() && i < displs.size(); ++i) {
    if (counts[i] > 0) e = std::max(e, displs[i] + counts[i]);
  }
  return e;
}

}  // namespace

BufferLayout layout_of(const CollArgs& a) {
  const size_t n = static_cast<size_t>(a.size);
  const size_t c = a.count;
  const bool root = a.rank == a.root;
  BufferLayout l;
  l.in_place = a.in_place;
  switch (a.op) {
    case CollOp::kAllreduce:
    case CollOp::kReduce: l.input_count = c; l.output_count = c; break;
    case CollOp::kBroadcast: l.input_count = root ? c : 0; l.output_count = c; break;
    case CollOp::kAllgather:
      l.input_count = c;
      l.output_count = n * c;
      l.input_offset = static_cast<size_t>(a.rank) * c;
      break;
    case CollOp::kAllgatherv:
      l.input_count = a.counts[a.rank];
      l.output_count = extent(a.counts, a.displs);
      l.input_offset = a.displs[a.rank];
      break;
    case CollOp::kReduceScatter: l.input_count = n * c; l.output_count = c; break;
    case CollOp::kReduceScatterv:
      l.input_count = extent(a.counts, a.displs);
      l.output_count = a.counts[a.rank];
      break;
    case CollOp::kAlltoall: l.input_count = n * c; l.output_count = n * c; break;
    case CollOp::kAlltoallv:
      l.input_count = extent(a.send_counts, a.send_displs);
      l.output_count = extent(a.counts, a.displs);
      break;
    case CollOp::kGather:
      l.input_count = c;
      l.output_count = root ? n * c : 0;
      l.input_offset = static_cast<size_t>(a.rank) * c;  // MPI: the root's block, in place
      break;
    case CollOp::kScatter: l.input_count = root ? n * c : 0; l.output_count = c; break;
    case CollOp::kBarrier: break;
  }
  if (!a.in_place) l.input_offset = 0;
  return l;
}

std::vector<Range> rank_blocks(const CollArgs& a) {
  std::vector<Range> blocks(static_cast<size_t>(a.size));
  const bool v = a.op == CollOp::kAllgatherv || a.op == CollOp::kReduceScatterv ||
                 a.op == CollOp::kAlltoallv;
  for (size_t p = 0; p < blocks.size(); ++p) {
    blocks[p] = v ? Range{a.displs[p], a.counts[p]} : Range{p * a.count, a.count};
  }
  return blocks;
}

std::vector<Range> send_blocks(const CollArgs& a) {
  if (a.op != CollOp::kAlltoallv) return rank_blocks(a);
  std::vector<Range> blocks(static_cast<size_t>(a.size));
  for (size_t p = 0; p < blocks.size(); ++p) blocks[p] = Range{a.send_displs[p], a.send_counts[p]};
  return blocks;
}

std::vector<Range> covered_runs(std::vector<Range> blocks) {
  std::erase_if(blocks, [](const Range& r) { return r.count == 0; });
  std::sort(blocks.begin(), blocks.end(),
            [](const Range& x, const Range& y) { return x.offset < y.offset; });
  std::vector<Range> runs;
  for (const Range& r : blocks) {
    if (!runs.empty() && r.offset <= runs.back().end()) {
      size_t end = std::max(runs.back().end(), r.end());
      runs.back().count = end - runs.back().offset;
    } else {
      runs.push_back(r);
    }
  }
  return runs;
}

void validate_args(const CollArgs& a) {
  std::string what = std::string(to_string(a.op));
  if (a.size < 1) throw invalid_usage(what + ": size must be >= 1");
  if (a.rank < 0 || a.rank >= a.size) {
    throw invalid_usage(what + ": rank " + std::to_string(a.rank) + " outside [0, " +
                        std::to_string(a.size) + ")");
  }
  if (a.root < 0 || a.root >= a.size) {
    throw invalid_usage(what + ": root " + std::to_string(a.root) + " outside [0, " +
                        std::to_string(a.size) + ")");
  }
  auto need = [&](const std::vector<size_t>& v, const char* name) {
    if (v.size() != static_cast<size_t>(a.size)) {
      throw invalid_usage(what + ": " + name + " has " + std::to_string(v.size()) +
                          " entries, expected " + std::to_string(a.size));
    }
  };
  switch (a.op) {
    case CollOp::kAllgatherv:
    case CollOp::kReduceScatterv:
      need(a.counts, "counts");
      need(a.displs, "displs");
      break;
    case CollOp::kAlltoallv:
      need(a.counts, "counts");
      need(a.displs, "displs");
      need(a.send_counts, "send_counts");
      need(a.send_displs, "send_displs");
      break;
    default: break;
  }
  if (a.ps_roots < 0) throw invalid_usage(what + ": ps_roots must be >= 0");
  if (!a.host_of.empty()) {
    if (a.host_of.size() != static_cast<size_t>(a.size)) {
      throw invalid_usage(what + ": host_of has " + std::to_string(a.host_of.size()) +
                          " entries, expected " + std::to_string(a.size) + " (or none)");
    }
    for (size_t r = 0; r < a.host_of.size(); ++r) {
      if (a.host_of[r] < 0) {
        throw invalid_usage(what + ": host_of[" + std::to_string(r) + "] is " +
                            std::to_string(a.host_of[r]) + ", host indices must be >= 0");
      }
    }
  }
}

Region resolve(const BufferLayout& l, Slice s) {
  switch (s.buffer) {
    case BufferId::kOutput: return Region{PhysBuffer::kOutput, s.offset, s.offset + s.count};
    case BufferId::kInput:
      if (l.in_place) {
        size_t b = l.input_offset + s.offset;
        return Region{PhysBuffer::kOutput, b, b + s.count};
      }
      return Region{PhysBuffer::kInput, s.offset, s.offset + s.count};
    case BufferId::kScratch: return Region{PhysBuffer::kScratch, s.offset, s.offset + s.count};
  }
  return Region{};
}

}  // namespace plait::coll
