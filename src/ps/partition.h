// Where a key's values live, in two levels:
//   placement  a key larger than the partition size (PLAIT_PS_PARTITION, 4 MiB) is split into
//              element ranges spread over all servers and balanced by bytes (BytePS's
//              partitioning: every server carries a similar share of every large tensor's
//              traffic); a smaller key is one range on the server its hash picks;
//   transfer   each range is cut into chunks of at most PLAIT_PS_CHUNK (256 KiB), one ring
//              slot each, all on the range's server. A chunk is what a push or a reply
//              carries and what a round counts, so a server answers the first chunks of a
//              range while the last are still arriving (with whole 4 MiB units, the last
//              reply came a whole unit after the last push; docs/measurements.md).
// Every rank computes the same table from the same registrations, in the same order, so
// placement needs no messages. The rest of the parameter server sees chunks only: a
// "partition" below is a chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "plait/types.h"

namespace plait::ps {

struct Partition {
  uint32_t id = 0;          // global index, in registration order (a transfer chunk)
  uint64_t key = 0;
  size_t first = 0;         // first element of the key in this partition
  size_t count = 0;         // elements
  int server = 0;           // 0.. among the servers
  uint32_t local = 0;       // index among its server's partitions
  size_t bytes(DataType dtype) const { return count * dtype_size(dtype); }
};

class PartitionTable {
 public:
  PartitionTable(int servers, size_t partition_bytes, size_t chunk_bytes);

  // Splits and places one key; returns the ids of its partitions, in element order.
  std::vector<uint32_t> add(uint64_t key, size_t count, DataType dtype);

  const Partition& operator[](uint32_t id) const { return parts_[id]; }
  size_t size() const { return parts_.size(); }
  // Bytes placed on each server so far.
  const std::vector<size_t>& load() const { return load_; }
  // Partitions on one server, in id order.
  const std::vector<uint32_t>& on_server(int server) const { return by_server_[server]; }
  size_t partition_bytes() const { return partition_bytes_; }
  size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  int least_loaded() const;

  const int servers_;
  const size_t partition_bytes_;
  const size_t chunk_bytes_;
  std::vector<Partition> parts_;
  std::vector<size_t> load_;
  std::vector<std::vector<uint32_t>> by_server_;
};

// The server of a small key: a 64-bit mix of the key, so that consecutive keys spread.
int hash_server(uint64_t key, int servers);

}  // namespace plait::ps
