// Range partitions for a distributed sort: every rank samples its records' keys, all ranks
// see all samples, and each picks the same size - 1 splitters at even quantiles (TeraSort's
// sampler). Partition p then holds the keys in [splitter p-1, splitter p), so the output of
// rank p precedes rank p + 1's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "plait/rdma.h"
#include "shuffle/record_summary.h"

namespace plait::shuffle {

class RangePartitioner {
 public:
  // Splitters from a sorted list of keys, for `parts` partitions.
  RangePartitioner(std::vector<Key> sorted_samples, int parts);

  // Collective: up to `per_rank` keys evenly spaced through this rank's records.
  static RangePartitioner sample(rdma::Fabric& fabric, const uint8_t* records, size_t count,
                                 size_t per_rank, uint64_t tag);

  // The partition of a record (its first kKeyBytes bytes): how many splitters are <= its key.
  int partition(const uint8_t* record) const;
  const std::vector<Key>& splitters() const { return splitters_; }

 private:
  std::vector<Key> splitters_;
};

}  // namespace plait::shuffle
