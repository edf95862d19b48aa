#include "transport/tcp/hello.h"

#include <string>

#include "plait/error.h"
#include "transport/tcp/tcp_settings.h"

namespace plait::transport::tcp {

size_t hello_name_length(const Hello& h) {
  if (h.magic != Hello::kHelloMagic || h.version != Hello::kWireVersion)
    throw invalid_usage("peer is not a plait tcp fabric of the same version (hello magic " +
                        std::to_string(h.magic) + ", version " + std::to_string(h.version) + ")");
  if (h.name_length > kMaxHelloNameBytes)
    throw invalid_usage("peer sent an oversized fabric name");
  return h.name_length;
}

void check_hello(const Hello& h, std::string_view name, const FabricOptions& o) {
  if (name != o.name)
    throw invalid_usage("peer belongs to fabric '" + std::string(name) + "', not '" + o.name +
                        "'");
  if (h.size != o.size || h.streams != static_cast<uint32_t>(o.config.get<TcpSettings>().streams))
    throw invalid_usage("peer rank " + std::to_string(h.rank) + " has size " +
                        std::to_string(h.size) + " and " + std::to_string(h.streams) +
                        " streams, we have " + std::to_string(o.size) + " and " +
                        std::to_string(o.config.get<TcpSettings>().streams));
  const bool integrity = (h.flags & Hello::kHelloIntegrity) != 0;
  if (integrity != o.config.get<TcpSettings>().integrity)
    throw invalid_usage("peer rank " + std::to_string(h.rank) + " has PLAIT_TCP_INTEGRITY=" +
                        (integrity ? "1" : "0") + ", this rank " +
                        (o.config.get<TcpSettings>().integrity ? "1" : "0") + ": every rank must set it alike");
  if (h.rank < 0 || h.rank >= o.size || h.stream >= h.streams)
    throw invalid_usage("peer sent an invalid rank " + std::to_string(h.rank) + " / stream " +
                        std::to_string(h.stream));
}

}  // namespace plait::transport::tcp
