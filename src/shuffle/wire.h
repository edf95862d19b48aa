// The Shuffle's messages (the protocol is described in shuffle_impl.h) and the checks of
// those a peer sends: pure functions of the peer's bytes, so that the shuffle and the fuzz
// target (fuzz/shuffle_wire_fuzz.cc) run the same checks. Each throws plait::Error(kRemote)
// naming the peer and saying what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace plait::shuffle {

struct BlockWire {  // one entry of a kLocation message, or a kTarget message
  uint64_t addr = 0;  // the region's remote key (memory blocks)
  uint64_t length = 0;
  uint64_t key = 0;
  uint64_t offset = 0;  // in the region, or in the spill file
  uint64_t bytes = 0;
  uint64_t in_file = 0;  // 1: in the mapper's spill file
};
static_assert(sizeof(BlockWire) == 48);

struct RequestWire {  // a kRequest message
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t id = 0;
};

struct CreditWire {  // a kCredit message
  uint64_t block = 0;   // which of the mapper's blocks for this reducer (its location order)
  uint64_t offset = 0;  // in the block
  uint64_t bytes = 0;
  uint64_t id = 0;      // the kWritten message's tag
  uint64_t addr = 0;    // the reducer's window region (remote key) ...
  uint64_t length = 0;
  uint64_t key = 0;
  uint64_t window = 0;  // ... and the offset of the window in it
};
static_assert(sizeof(CreditWire) == 64);

enum class MsgKind : uint64_t {
  kLocation = 1, kTarget = 2, kDone = 3, kRequest = 4, kData = 5, kCredit = 6, kWritten = 7
};

// Reducer `rank`'s check of mapper `mapper`'s location message: `bytes` bytes arrived at `in`
// (a header entry, then the blocks): whole entries, a header that counts the blocks, blocks of
// whole records of `record_bytes` that add up to the header's total. Returns how many blocks
// follow the header (in[1 ..]) and the bytes they hold.
struct Locations {
  size_t blocks = 0;
  uint64_t total = 0;
};
Locations check_locations(const BlockWire* in, size_t bytes, size_t record_bytes, int mapper,
                          int rank);

// Reducer `rank`'s partition: the bytes its mappers' location messages hold together (`from`,
// by mapper), refused when they add up past 2^64.
uint64_t partition_total(const std::vector<uint64_t>& from, int rank);

// Mapper `rank`'s check of a read request of `bytes` bytes from reducer `peer`.
void check_request(size_t bytes, int peer, int rank);
// How many bytes a mapper sends for a request into its spill file of `file_bytes`: those
// asked for, or none for a request that is not inside the file (the reducer names it).
uint64_t served_bytes(const RequestWire& request, uint64_t file_bytes);

// Mapper `rank`'s check of a credit of `bytes` bytes from reducer `peer`, whose blocks (as
// sent in the location message: the header entry first) are `blocks`: the bytes it names
// must lie inside one of them.
void check_credit(const CreditWire& credit, size_t bytes, const std::vector<BlockWire>& blocks,
                  int peer, int rank);

// Mapper `rank`'s check of reducer `peer`'s target (push without a key), `bytes` bytes: it
// must expect the `have` bytes of its partition that this mapper holds.
void check_target(const BlockWire& target, size_t bytes, uint64_t have, int peer, int rank);

}  // namespace plait::shuffle
