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
  uint64_t sum = 0;
  for (size_t i = 1; i < entries; ++i) sum += in[i].bytes;
  if (sum != total)
    throw bad("its blocks add up to " + std::to_string(sum) + " bytes, not " + std::to_string(total));
  return {entries - 1, total};
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
  if (!whole || in.block + 1 >= blocks.size() || in.offset > blocks[in.block + 1].bytes ||
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
  if (target.bytes != have)
    throw remote_error("reducer expects " + std::to_string(target.bytes) + " bytes of partition " +
                           std::to_string(peer) + ", we have " + std::to_string(have),
                       {.rank = rank, .peer = peer, .op = "shuffle"});
}

}  // namespace plait::shuffle
