#include "ps/partition.h"

#include <algorithm>

namespace plait::ps {

int hash_server(uint64_t key, int servers) {
  // splitmix64's finaliser: every key bit moves every output bit.
  uint64_t z = key + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<int>(z % static_cast<uint64_t>(servers));
}

PartitionTable::PartitionTable(int servers, size_t partition_bytes)
    : servers_(servers), partition_bytes_(partition_bytes), load_(servers, 0), by_server_(servers) {}

int PartitionTable::least_loaded() const {
  return static_cast<int>(std::min_element(load_.begin(), load_.end()) - load_.begin());
}

std::vector<uint32_t> PartitionTable::add(uint64_t key, size_t count, DataType dtype) {
  const size_t elem = dtype_size(dtype);
  // The most elements a partition may hold; every partition gets as many as it can, the
  // last one the rest: equal ranges keep the servers' shares equal.
  const size_t per = std::max<size_t>(1, partition_bytes_ / elem);
  const size_t n = (count + per - 1) / per;
  const size_t each = (count + n - 1) / n;
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < n; ++i) {
    Partition p;
    p.id = static_cast<uint32_t>(parts_.size());
    p.key = key;
    p.first = i * each;
    p.count = std::min(each, count - p.first);
    // One partition: by hash. Several: each to the server with the fewest bytes so far.
    p.server = n == 1 ? hash_server(key, servers_) : least_loaded();
    p.local = static_cast<uint32_t>(by_server_[p.server].size());
    load_[p.server] += p.bytes(dtype);
    by_server_[p.server].push_back(p.id);
    parts_.push_back(p);
    ids.push_back(p.id);
  }
  return ids;
}

}  // namespace plait::ps
