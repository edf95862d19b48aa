// The keys every rank registered, in the same order on every rank, and where their values
// live (PartitionTable). Workers check calls against it; servers size their shards from it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "plait/ps.h"
#include "ps/partition.h"

namespace plait::ps {

struct KeyInfo {
  uint64_t key = 0;
  size_t count = 0;
  DataType dtype = DataType::kF32;
  Update update;
  std::vector<uint32_t> partitions;  // in element order
  size_t bytes() const { return count * dtype_size(dtype); }
};

class KeyTable {
 public:
  KeyTable(int servers, size_t partition_bytes, size_t chunk_bytes)
      : parts_(servers, partition_bytes, chunk_bytes) {}

  // Throws kInvalidUsage for a key already registered, a zero count, or an optimizer on an
  // integer key.
  const KeyInfo& add(const KeySpec& spec, int rank);
  // Null if the key was never registered.
  const KeyInfo* find(uint64_t key) const {
    auto it = keys_.find(key);
    return it == keys_.end() ? nullptr : &it->second;
  }
  const PartitionTable& partitions() const { return parts_; }
  // The key a partition belongs to.
  const KeyInfo& key_of(uint32_t partition) const { return keys_.at(parts_[partition].key); }

 private:
  PartitionTable parts_;
  std::unordered_map<uint64_t, KeyInfo> keys_;
};

// "key 7 (partition 2 of 4, server rank 5)" for messages.
std::string describe_partition(const KeyInfo& key, const Partition& p, int server_rank);

}  // namespace plait::ps
