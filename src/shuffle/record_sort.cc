#include "shuffle/record_sort.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "plait/error.h"
#include "plait/shuffle.h"
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

// The key's first 10 bytes as (big-endian 8, big-endian 2), zero-padded when shorter.
Entry make_entry(const uint8_t* k, size_t key_bytes, size_t index) {
  uint64_t hi;
  if (key_bytes >= 10) {
    std::memcpy(&hi, k, 8);
    return Entry{__builtin_bswap64(hi), static_cast<uint16_t>(k[8] << 8 | k[9]), 0,
                 static_cast<uint32_t>(index)};
  }
  uint8_t head[10] = {};
  std::memcpy(head, k, key_bytes);
  std::memcpy(&hi, head, 8);
  return Entry{__builtin_bswap64(hi), static_cast<uint16_t>(head[8] << 8 | head[9]), 0,
               static_cast<uint32_t>(index)};
}

}  // namespace

RecordOrder::RecordOrder(const uint8_t* in, size_t count, size_t record_bytes, size_t key_bytes)
    : in_(in), count_(count), record_bytes_(record_bytes) {
  if (key_bytes == 0 || key_bytes > record_bytes)
    throw invalid_usage("sort_records: a key of " + std::to_string(key_bytes) +
                        " bytes in records of " + std::to_string(record_bytes));
  if (count == 0) return;
  // Indices are 32 bits: 4 G records (400 GB) in one rank's memory is past any machine's.
  if (count > UINT32_MAX)
    throw invalid_usage("sort_records: " + std::to_string(count) +
                        " records in one call; at most 2^32 - 1");
  Buffer a_mem(count * sizeof(Entry));
  entries_ = Buffer(count * sizeof(Entry));
  auto* a = reinterpret_cast<Entry*>(a_mem.data());
  auto* b = reinterpret_cast<Entry*>(entries_.data());
  // One pass over the keys: the entries, and how many fall in each bucket of their first
  // 16 bits.
  constexpr size_t kBuckets = 1 << 16;
  std::vector<size_t> start(kBuckets + 1, 0);
  for (size_t i = 0; i < count; ++i) {
    a[i] = make_entry(in + i * record_bytes, key_bytes, i);
    ++start[(a[i].hi >> 48) + 1];
  }
  for (size_t d = 0; d < kBuckets; ++d) start[d + 1] += start[d];
  // Scatter to the buckets (stable), then each bucket sorted on its own: random keys put a
  // few hundred entries in a bucket, which sort in cache; ties are ordered by input index,
  // so the result is the stable order whatever the skew.
  std::vector<size_t> next(start.begin(), start.end() - 1);
  for (size_t i = 0; i < count; ++i) b[next[a[i].hi >> 48]++] = a[i];
  const auto less = [](const Entry& x, const Entry& y) {
    if (x.hi != y.hi) return x.hi < y.hi;
    if (x.lo != y.lo) return x.lo < y.lo;
    return x.index < y.index;
  };
  // Past 10 bytes, the rest of the key decides between equal heads.
  const auto long_less = [&](const Entry& x, const Entry& y) {
    if (x.hi != y.hi) return x.hi < y.hi;
    if (x.lo != y.lo) return x.lo < y.lo;
    const int c = std::memcmp(in + size_t{x.index} * record_bytes + 10,
                              in + size_t{y.index} * record_bytes + 10, key_bytes - 10);
    return c != 0 ? c < 0 : x.index < y.index;
  };
  for (size_t d = 0; d < kBuckets; ++d) {
    if (start[d + 1] - start[d] < 2) continue;
    if (key_bytes > 10)
      std::sort(&b[start[d]], &b[start[d + 1]], long_less);
    else
      std::sort(&b[start[d]], &b[start[d + 1]], less);
  }
}

void RecordOrder::gather(size_t first, size_t n, uint8_t* out) const {
  const auto* e = reinterpret_cast<const Entry*>(entries_.data()) + first;
  // The reads are random: fetch ahead.
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(in_ + size_t{e[i + kAhead].index} * record_bytes_);
    std::memcpy(out + i * record_bytes_, in_ + size_t{e[i].index} * record_bytes_, record_bytes_);
  }
}

void sort_records(const uint8_t* in, size_t count, uint8_t* out, size_t record_bytes,
                  size_t key_bytes) {
  RecordOrder(in, count, record_bytes, key_bytes).gather(0, count, out);
}

}  // namespace plait::shuffle
