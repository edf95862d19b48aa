#include "shuffle/wire.h"

#include <string>

#include "plait/error.h"

namespace plait::shuffle {

Locations check_locations(const BlockWire* in, size_t bytes, size_t record_bytes, int mapper,
                          int rank) {
  const size_t entries = bytes / sizeof(BlockWire);
  const auto bad = [&](const std::string& why) {
    return remote_error("mapper " + std::to_string(mapper) + " sent a location message of " +
                            std::to_string(bytes) + " bytes: " + why,
                        {.rank = rank, .peer = mapper, .op = "shuffle"});
  };
  if (bytes % sizeof(BlockWire) != 0 || entries == 0) throw bad("not whole entries");
  if (in[0].offset != entries - 1)
    throw bad("its header counts " + std::to_string(in[0].offset) + " blocks");
  const uint64_t total = in[0].bytes;
  // The sum stays at most the total, so it cannot wrap: blocks that wrapped around to the
  // total would be laid out far past the partition buffer of that size.
  uint64_t sum = 0;
  for (size_t i = 1; i < entries; ++i) {
    const uint64_t b = in[i].bytes;
    // The merge steps through a block a record at a time: a part record would take it past
    // the block's end.
    if (record_bytes == 0 || b % record_bytes != 0)
      throw bad("block " + std::to_string(i - 1) + " of " + std::to_string(b) +
                " bytes is not whole records of " + std::to_string(record_bytes));
    if (b > total - sum)
      throw bad("its blocks add up to more than its total of " + std::to_string(total) + " bytes");
    sum += b;
  }
  if (sum != total)
    throw bad("its blocks add up to " + std::to_string(sum) + " bytes, not " + std::to_string(total));
  return {entries - 1, total};
}

uint64_t partition_total(const std::vector<uint64_t>& from, int rank) {
  uint64_t total = 0;
  for (size_t m = 0; m < from.size(); ++m) {
    if (from[m] > UINT64_MAX - total)
      throw remote_error("the mappers' blocks of partition " + std::to_string(rank) +
                             " add up to more than 2^64 bytes (mapper " + std::to_string(m) +
                             " sent " + std::to_string(from[m]) + ")",
                         {.rank = rank, .peer = static_cast<int>(m), .op = "shuffle"});
    total += from[m];
  }
  return total;
}

void check_request(size_t bytes, int peer, int rank) {
  if (bytes != sizeof(RequestWire))
    throw remote_error("a read request of " + std::to_string(bytes) + " bytes",
                       {.rank = rank, .peer = peer, .op = "shuffle"});
}

uint64_t served_bytes(const RequestWire& request, uint64_t file_bytes) {
  return request.offset <= file_bytes && request.bytes <= file_bytes - request.offset
             ? request.bytes
             : 0;
}

void check_credit(const CreditWire& in, size_t bytes, const std::vector<BlockWire>& blocks,
                  int peer, int rank) {
  const bool whole = bytes == sizeof(CreditWire);
  // blocks[0] is the header entry: block b is blocks[b + 1] (b + 1 must not wrap to it).
  if (!whole || blocks.empty() || in.block >= blocks.size() - 1 ||
      in.offset > blocks[in.block + 1].bytes ||
      in.bytes > blocks[in.block + 1].bytes - in.offset)
    throw remote_error(
        whole ? "a credit for bytes " + std::to_string(in.offset) + ".." +
                    std::to_string(in.offset + in.bytes) + " of block " + std::to_string(in.block) +
                    " of partition " + std::to_string(peer) + ", which has " +
                    std::to_string(blocks.size() - 1) + " blocks"
              : "a credit message of " + std::to_string(bytes) + " bytes",
        {.rank = rank, .peer = peer, .op = "shuffle"});
}

void check_target(const BlockWire& target, size_t bytes, uint64_t have, int peer, int rank) {
  if (bytes != sizeof(BlockWire))
    throw remote_error("a target message of " + std::to_string(bytes) + " bytes",
                       {.rank = rank, .peer = peer, .op = "shuffle"});
  if (target.bytes != have)
    throw remote_error("reducer expects " + std::to_string(target.bytes) + " bytes of partition " +
                           std::to_string(peer) + ", we have " + std::to_string(have),
                       {.rank = rank, .peer = peer, .op = "shuffle"});
}

}  // namespace plait::shuffle
