#include "shuffle/record_sort.h"

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "plait/error.h"
#include "shuffle/gensort.h"

namespace plait::shuffle {
namespace {

// Key bytes 0-7 big-endian in `hi` and 8-9 in `lo`, so integer order is memcmp order.
struct Entry {
  uint64_t hi;
  uint16_t lo;
  uint16_t unused;
  uint32_t index;
};
static_assert(sizeof(Entry) == 16);

inline unsigned digit(const Entry& e, int byte) {  // byte 0 is the key's first
  return byte < 8 ? static_cast<unsigned>(e.hi >> (56 - 8 * byte)) & 0xff
                  : static_cast<unsigned>(e.lo >> (8 * (9 - byte))) & 0xff;
}

}  // namespace

void sort_records(const uint8_t* in, size_t count, uint8_t* out) {
  if (count == 0) return;
  // Indices are 32 bits: 4 G records (400 GB) in one rank's memory is past any machine's.
  if (count > UINT32_MAX)
    throw invalid_usage("sort_records: " + std::to_string(count) +
                        " records in one call; at most 2^32 - 1");
  auto a = std::make_unique_for_overwrite<Entry[]>(count);
  auto b = std::make_unique_for_overwrite<Entry[]>(count);
  // Counts for every digit in one read of the keys.
  std::array<std::array<size_t, 256>, kKeyBytes> counts{};
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* k = in + i * kRecordBytes;
    uint64_t hi;
    std::memcpy(&hi, k, 8);
    Entry e{__builtin_bswap64(hi), static_cast<uint16_t>(k[8] << 8 | k[9]), 0,
            static_cast<uint32_t>(i)};
    a[i] = e;
    for (size_t d = 0; d < kKeyBytes; ++d) ++counts[d][k[d]];
  }
  Entry* src = a.get();
  Entry* dst = b.get();
  for (int byte = static_cast<int>(kKeyBytes) - 1; byte >= 0; --byte) {
    std::array<size_t, 256>& c = counts[byte];
    if (c[digit(src[0], byte)] == count) continue;  // every key has this byte: nothing moves
    size_t offset = 0;
    for (size_t& n : c) offset += std::exchange(n, offset);
    for (size_t i = 0; i < count; ++i) dst[c[digit(src[i], byte)]++] = src[i];
    std::swap(src, dst);
  }
  for (size_t i = 0; i < count; ++i)
    std::memcpy(out + i * kRecordBytes, in + size_t{src[i].index} * kRecordBytes, kRecordBytes);
}

}  // namespace plait::shuffle
