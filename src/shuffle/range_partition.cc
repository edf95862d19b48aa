#include "shuffle/range_partition.h"

#include <algorithm>
#include <cstring>

#include "shuffle/all_gather.h"

namespace plait::shuffle {

RangePartitioner::RangePartitioner(std::vector<Key> sorted, int parts) {
  if (sorted.empty() || parts <= 1) return;  // no keys anywhere: everything in partition 0
  for (int p = 1; p < parts; ++p)
    splitters_.push_back(sorted[sorted.size() * static_cast<size_t>(p) / static_cast<size_t>(parts)]);
}

RangePartitioner RangePartitioner::sample(rdma::Fabric& fabric, const uint8_t* records,
                                          size_t count, size_t per_rank, uint64_t tag) {
  const size_t take = std::min(count, per_rank);
  std::vector<uint8_t> mine(take * kKeyBytes);
  for (size_t i = 0; i < take; ++i)
    std::memcpy(mine.data() + i * kKeyBytes, records + (i * count / take) * kRecordBytes, kKeyBytes);
  std::vector<Key> all;
  for (const std::vector<uint8_t>& theirs : all_gather(fabric, mine, tag)) {
    for (size_t at = 0; at + kKeyBytes <= theirs.size(); at += kKeyBytes) {
      Key k;
      std::memcpy(k.data(), theirs.data() + at, kKeyBytes);
      all.push_back(k);
    }
  }
  std::sort(all.begin(), all.end());
  return RangePartitioner(std::move(all), fabric.size());
}

int RangePartitioner::partition(const uint8_t* record) const {
  // std::array compares lexicographically as unsigned bytes: memcmp order.
  Key k;
  std::memcpy(k.data(), record, kKeyBytes);
  return static_cast<int>(std::upper_bound(splitters_.begin(), splitters_.end(), k) - splitters_.begin());
}

}  // namespace plait::shuffle
