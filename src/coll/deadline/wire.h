// What the deadline allreduce sends: each rank's contribution (a header, then the values)
// to the aggregator, and each step's result (a header with the contributor set, then the
// values) back. Headers travel as their own small messages so the aggregator can size the
// values' receive before they come.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

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

// Tags: the step's low 29 bits, then which message (0: header, 1: values).
inline uint32_t tag(uint64_t step, int part) {
  return static_cast<uint32_t>(((step & ((uint64_t{1} << 29) - 1)) << 1) | static_cast<uint64_t>(part));
}

// Words of a rank bit set for `size` ranks.
inline size_t mask_words(int size) { return (static_cast<size_t>(size) + 63) / 64; }

// The result header: step, count, then as bit masks the contributors, the slow ranks and the
// ranks present in time (contributors and those that joined without values).
struct ResultHeader {
  uint64_t step = 0;
  uint64_t count = 0;
  std::vector<uint64_t> contributors;  // mask_words(size)
  std::vector<uint64_t> slow;          // mask_words(size)
  std::vector<uint64_t> present;       // mask_words(size)

  static size_t bytes(int size) { return 24 + 24 * mask_words(size); }

  void encode(std::vector<char>& out, int size) const {
    out.assign(bytes(size), 0);
    const uint64_t fixed[3] = {kResultMagic, step, count};
    std::memcpy(out.data(), fixed, 24);
    std::memcpy(out.data() + 24, contributors.data(), 8 * mask_words(size));
    std::memcpy(out.data() + 24 + 8 * mask_words(size), slow.data(), 8 * mask_words(size));
    std::memcpy(out.data() + 24 + 16 * mask_words(size), present.data(), 8 * mask_words(size));
  }
  // False when the bytes are not a result header.
  bool decode(const char* in, int size) {
    uint64_t fixed[3];
    std::memcpy(fixed, in, 24);
    if (fixed[0] != kResultMagic) return false;
    step = fixed[1];
    count = fixed[2];
    contributors.assign(mask_words(size), 0);
    slow.assign(mask_words(size), 0);
    present.assign(mask_words(size), 0);
    std::memcpy(contributors.data(), in + 24, 8 * mask_words(size));
    std::memcpy(slow.data(), in + 24 + 8 * mask_words(size), 8 * mask_words(size));
    std::memcpy(present.data(), in + 24 + 16 * mask_words(size), 8 * mask_words(size));
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
