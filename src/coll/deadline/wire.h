// What the deadline allreduce sends: each rank's contribution (a header, then the values)
// to the aggregator, and each step's result (a header with the contributor set, then the
// values) back. Headers travel as their own small messages so the aggregator can size the
// values' receive before they come.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "plait/error.h"
#include "plait/types.h"

namespace plait::deadline::wire {

inline constexpr uint64_t kContributionMagic = 0x706c6169'74646c63;  // "plaitdlc"
inline constexpr uint64_t kResultMagic = 0x706c6169'74646c72;        // "plaitdlr"

struct ContributionHeader {
  uint64_t magic = kContributionMagic;
  uint64_t step = 0;
  uint64_t count = 0;
  uint8_t dtype = 0;
  uint8_t op = 0;
  uint8_t flags = 0;  // kNoValues: the rank joins the step without values (no values message)
  uint8_t pad[5] = {};
};
inline constexpr uint8_t kNoValues = 1;
static_assert(sizeof(ContributionHeader) == 32);

// A contribution header as the aggregator receives it from rank `rank` for step `step`:
// `bytes` bytes arrived at `in` (a buffer of sizeof(ContributionHeader)). Checks its size,
// magic and step, a dtype and reduction op that exist, and a count whose bytes fit in a vector
// (at most PTRDIFF_MAX). A pure function of the peer's bytes, so that the aggregator and the
// fuzz target (fuzz/deadline_wire_fuzz.cc) run the same checks. Throws
// plait::Error(kInvalidUsage) with `ctx`.
ContributionHeader check_contribution(const char* in, size_t bytes, uint64_t step, int rank,
                                      const ErrorContext& ctx);

// Tags: the step's low 18 bits, then which message: 0 the header, 1.. the values' chunks.
inline constexpr size_t kMaxChunks = 4095;
inline uint32_t tag(uint64_t step, size_t part) {
  return static_cast<uint32_t>(((step & ((uint64_t{1} << 18) - 1)) << 12) | part);
}

// How `count` values of `elem` bytes move: in chunks of about `chunk_bytes` (0: one message).
struct Chunking {
  size_t count = 0, per_chunk = 0, chunks = 1;
  size_t begin(size_t c) const { return c * per_chunk; }
  size_t end(size_t c) const { return std::min(count, (c + 1) * per_chunk); }
};
inline Chunking chunking(size_t count, size_t elem, size_t chunk_bytes) {
  Chunking k;
  k.count = count;
  k.per_chunk = chunk_bytes == 0 || count == 0 ? std::max<size_t>(count, 1)
                                               : std::max<size_t>(chunk_bytes / elem, 1);
  // Not (count + per_chunk - 1) / per_chunk: with one chunk (per_chunk = count) that wraps
  // for a count past 2^63, which a peer's header may claim.
  k.chunks = count == 0 ? 1 : count / k.per_chunk + (count % k.per_chunk != 0);
  return k;
}

// Words of a rank bit set for `size` ranks.
inline size_t mask_words(int size) { return (static_cast<size_t>(size) + 63) / 64; }

// The result header: step, count, the share of the values the step went without (parts per
// million), then as bit masks the contributors (every chunk in), the slow ranks, the ranks
// present in time (contributors and those that joined without values, or whose chunks were
// still on the way), and with several chunks one mask per chunk.
struct ResultHeader {
  uint64_t step = 0;
  uint64_t count = 0;
  uint64_t dropped_ppm = 0;
  std::vector<uint64_t> contributors;  // mask_words(size)
  std::vector<uint64_t> slow;
  std::vector<uint64_t> present;
  std::vector<uint64_t> chunks;  // chunks x mask_words(size), when chunks > 1

  static size_t bytes(int size, size_t nchunks) {
    return 32 + 8 * mask_words(size) * (3 + (nchunks > 1 ? nchunks : 0));
  }

  void encode(std::vector<char>& out, int size) const {
    const size_t w = 8 * mask_words(size);
    out.assign(32 + 3 * w + 8 * chunks.size(), 0);
    const uint64_t fixed[4] = {kResultMagic, step, count, dropped_ppm};
    std::memcpy(out.data(), fixed, 32);
    std::memcpy(out.data() + 32, contributors.data(), w);
    std::memcpy(out.data() + 32 + w, slow.data(), w);
    std::memcpy(out.data() + 32 + 2 * w, present.data(), w);
    if (!chunks.empty()) std::memcpy(out.data() + 32 + 3 * w, chunks.data(), 8 * chunks.size());
  }
  // False when the `bytes` received at `in` are not a result header for a job of `size` and
  // a step of `nchunks` chunks (in holds at least bytes(size, nchunks)).
  bool decode(const char* in, size_t bytes, int size, size_t nchunks) {
    if (bytes != ResultHeader::bytes(size, nchunks)) return false;
    uint64_t fixed[4];
    std::memcpy(fixed, in, 32);
    if (fixed[0] != kResultMagic) return false;
    step = fixed[1];
    count = fixed[2];
    dropped_ppm = fixed[3];
    const size_t words = mask_words(size), w = 8 * words;
    contributors.assign(words, 0);
    slow.assign(words, 0);
    present.assign(words, 0);
    chunks.assign(nchunks > 1 ? nchunks * words : 0, 0);
    std::memcpy(contributors.data(), in + 32, w);
    std::memcpy(slow.data(), in + 32 + w, w);
    std::memcpy(present.data(), in + 32 + 2 * w, w);
    if (!chunks.empty()) std::memcpy(chunks.data(), in + 32 + 3 * w, 8 * chunks.size());
    return true;
  }
};

inline void set_bit(std::vector<uint64_t>& mask, int r) { mask[r / 64] |= uint64_t{1} << (r % 64); }
inline bool bit(const std::vector<uint64_t>& mask, int r) { return (mask[r / 64] >> (r % 64)) & 1; }
inline std::vector<int> ranks_of(const std::vector<uint64_t>& mask, int size) {
  std::vector<int> out;
  for (int r = 0; r < size; ++r)
    if (bit(mask, r)) out.push_back(r);
  return out;
}

}  // namespace plait::deadline::wire
