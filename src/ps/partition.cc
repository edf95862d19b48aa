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

PartitionTable::PartitionTable(int servers, size_t partition_bytes, size_t chunk_bytes)
    : servers_(servers),
      partition_bytes_(partition_bytes),
      chunk_bytes_(std::min(chunk_bytes, partition_bytes)),
      load_(servers, 0),
      by_server_(servers) {}

namespace {

// n nearly equal ranges of [0, count): each holds at most `per` elements.
struct Split {
  size_t n, each;
};
Split split(size_t count, size_t per) {
  const size_t n = (count + per - 1) / per;
  return {n, (count + n - 1) / n};
}

}  // namespace

int PartitionTable::least_loaded() const {
  return static_cast<int>(std::min_element(load_.begin(), load_.end()) - load_.begin());
}

std::vector<uint32_t> PartitionTable::add(uint64_t key, size_t count, DataType dtype) {
  const size_t elem = dtype_size(dtype);
  // Equal ranges keep the servers' shares equal; every range as large as it may be.
  const Split ranges = split(count, std::max<size_t>(1, partition_bytes_ / elem));
  std::vector<uint32_t> ids;
  for (size_t r = 0; r < ranges.n; ++r) {
    const size_t first = r * ranges.each;
    const size_t length = std::min(ranges.each, count - first);
    // One range: by hash. Several: each to the server with the fewest bytes so far.
    const int server = ranges.n == 1 ? hash_server(key, servers_) : least_loaded();
    load_[server] += length * elem;
    const Split chunks = split(length, std::max<size_t>(1, chunk_bytes_ / elem));
    for (size_t c = 0; c < chunks.n; ++c) {
      Partition p;
      p.id = static_cast<uint32_t>(parts_.size());
      p.key = key;
      p.first = first + c * chunks.each;
      p.count = std::min(chunks.each, length - c * chunks.each);
      p.server = server;
      p.local = static_cast<uint32_t>(by_server_[server].size());
      by_server_[server].push_back(p.id);
      parts_.push_back(p);
      ids.push_back(p.id);
    }
  }
  return ids;
}

}  // namespace plait::ps
