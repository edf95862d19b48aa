// A shuffle: the data movement between the map and reduce stages of MapReduce and Spark.
// Every rank is a mapper, whose records are split into one partition per rank, and a
// reducer, which receives its partition from every mapper.
//
//   auto fabric = plait::rdma::Fabric::create(plait::bootstrap_from_env(30s), {.name = "shuffle"});
//   plait::shuffle::Shuffle shuffle(*fabric, {.record_bytes = 100});
//   shuffle.map(records, count, [&](const uint8_t* r) { return partition_of_key(r); });
//   plait::shuffle::Buffer mine = shuffle.exchange();  // partition fabric->rank(), from all
//
// Data path (docs/shuffle.md): map() writes the records partitioned into one region of
// registered memory (a counting pass, then one copy of each record). exchange() sends each
// reducer where its block is (region key, offset, length). Pull: the reducer reads the block
// with one-sided reads, several in flight, from every mapper, starting at a different mapper
// on every rank so that no mapper serves everybody at once; the mapper's CPU takes no part.
// Push: the reducer sends each mapper where to put its block in a region sized from the
// lengths, and the mapper writes it there; with key_bytes set, the reducer gives credits
// instead, one per window of its merge (where to write which bytes of which run), and the
// mapper writes each window's bytes when its credit comes (from memory, or read from its spill
// file), then says so. A mapper's own block is copied.
//
// Errors: a mapper that dies fails exchange() on every reducer still waiting for its block,
// naming the mapper, the partition and the bytes; a reducer that dies fails the mappers
// waiting for it to finish reading. Every wait is bounded by the fabric's timeout
// (PLAIT_TIMEOUT). Nothing is silently missing: exchange() returns every block whole or
// throws.
//
// Bounded memory (docs/shuffle.md, "Spill"): map() may be called several times in a round,
// each call's output being one run. With a memory budget, the runs over it are spilled to a
// file in spill_dir (sorted by key within each partition when key_bytes is set), and a
// reducer reads a spilled block by asking its mapper, which serves the read from the file
// while it waits for its own blocks. With key_bytes set, a reducer gets its partition merged
// in key order from all runs, fetching each run a window at a time while it merges; with
// exchange(sink) it never holds the partition whole, so a skewed partition (every key equal)
// costs the budget, not its size.
//
// Threads: one thread uses a Shuffle at a time. map() and exchange() alternate; each
// exchange() ends a round, collective over the fabric's ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plait/rdma.h"

namespace plait::shuffle {

enum class ShuffleMode : uint8_t { kPull, kPush };

struct ShuffleOptions {
  size_t record_bytes = 100;
  ShuffleMode mode = ShuffleMode::kPull;
  size_t fetch_bytes = size_t{4} << 20;  // one read (pull) or write (push)
  int in_flight = 4;  // reads outstanding per rank (pull), writes per reducer (push)
  // > 0: blocks are sorted by the records' first key_bytes bytes (memcmp order) and a
  // reducer's partition comes merged in that order.
  size_t key_bytes = 0;
  // > 0: at most this many bytes of map output stay in memory (runs past it are spilled),
  // and a reducer merging keeps its windows within it. Push mode needs key_bytes with it (a
  // push without a key writes the partition whole).
  size_t memory_bytes = 0;
  std::string spill_dir;  // where spill files go; "" = $TMPDIR, else /tmp
  // Spill files written past the page cache (O_DIRECT where the file system has it), read
  // back through it; false: both through it.
  bool direct_io = true;
};

// Memory for records: page-aligned and uninitialised (a vector would write a gigabyte of
// zeros only for the records to overwrite them). Move-only. Not backed by transparent huge
// pages on purpose: with the page cache full of input (a sort's normal state) the kernel
// compacts memory at fault time, and the map phase of 1 GB took 2.4-3.2 s instead of 0.63.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);  // throws Error(kSystem) when the memory is not there
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
};

struct ShuffleStats {
  double map_s = 0;       // partitioning into registered memory
  double exchange_s = 0;  // locations, the transfers, until every peer is done
  uint64_t records_mapped = 0;
  uint64_t records_received = 0;
  uint64_t bytes_sent = 0;      // of this rank's map output, to other ranks
  uint64_t bytes_received = 0;  // from other ranks
  uint64_t runs_spilled = 0;
  uint64_t bytes_spilled = 0;
  uint64_t spill_requests_served = 0;  // reads of this rank's spill file for other ranks
};

class Shuffle {
 public:
  // The fabric must outlive the Shuffle; the Shuffle uses it alone (its tags and queues).
  explicit Shuffle(rdma::Fabric& fabric, ShuffleOptions options = {});
  ~Shuffle();
  Shuffle(const Shuffle&) = delete;
  Shuffle& operator=(const Shuffle&) = delete;

  // Map output of this round: `count` records of options.record_bytes at `records`, record r
  // going to partition partition_of(r) in [0, fabric.size()). The records are copied (the
  // caller may reuse its memory at once); each call is one run, at most kMaxRuns a round.
  // Throws kInvalidUsage for a partition out of range (naming it and the record), before
  // anything is kept; kSystem when a spill cannot be written.
  void map(const void* records, size_t count, const std::function<int(const uint8_t*)>& partition_of);
  // As above, but the records' own memory becomes the run: they are partitioned in place and
  // registered, no copy made and no second buffer's pages touched (fresh memory's first touch
  // is most of a copying map's time). The records of one partition then come in no
  // particular order from this run; with key_bytes set they are sorted, out of place, as above.
  // Also throws kInvalidUsage when records' size is not a whole number of records; on a
  // throw the records go with it.
  void map(Buffer records, const std::function<int(const uint8_t*)>& partition_of);
  static constexpr size_t kMaxRuns = 1024;

  // Collective: the records every rank mapped to partition fabric.rank(), mapper 0's first,
  // each mapper's in the order it gave them (but see map(Buffer, ...)). On a failure the
  // round's pending operations are cancelled (nothing lands in freed memory) and the map
  // output dropped; the Shuffle can start another round, which every rank must then also start.
  Buffer exchange();

  // Collective, as exchange(), but the partition goes to `sink` a batch of records at a time
  // (each batch valid during the call only): in key order when key_bytes is set, else
  // mapper by mapper. With a key and a memory budget, memory stays within it whatever the
  // partition's size.
  using Sink = std::function<void(const uint8_t* records, size_t count)>;
  void exchange(const Sink& sink);

  const ShuffleStats& stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace plait::shuffle
