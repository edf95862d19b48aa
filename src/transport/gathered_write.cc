// The default of Fabric::write_gathered: a provider that cannot copy straight out of the
// pieces refuses, so that nobody pays a hidden staging copy they meant to avoid.
#include "transport/fabric.h"

namespace plait::transport {

void Fabric::write_gathered(int peer, const std::vector<LocalPiece>& pieces, const RemoteKey&,
                            uint64_t, std::optional<uint32_t>, CompletionQueue*, uint64_t) {
  size_t bytes = 0;
  for (const LocalPiece& piece : pieces) bytes += piece.length;
  throw invalid_usage("write_gathered: the " + capabilities().provider + " provider does not gather writes to rank " +
                          std::to_string(peer) + " (ask gathers_writes(); pack, then write)",
                      {.rank = rank(), .peer = peer, .op = "write_gathered", .bytes = static_cast<int64_t>(bytes)});
}

}  // namespace plait::transport
