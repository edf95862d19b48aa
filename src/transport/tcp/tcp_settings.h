// The tcp provider's settings (PLAIT_TCP_*).
#pragma once

#include <cstddef>
#include <string>

#include "core/config.h"

namespace plait::transport {

struct TcpSettings {
  // PLAIT_TCP_STREAMS: sockets per peer
  int streams = 2;
  // PLAIT_TCP_STRIPE: striping unit
  size_t stripe_bytes = 256 * 1024;
  // PLAIT_TCP_NOTSENT_LOWAT: unsent bytes a socket holds (TCP_NOTSENT_LOWAT); 0 = the kernel's default (as much as the send buffer takes)
  size_t notsent_lowat = 128 * 1024;
  // PLAIT_TCP_IFNAME: interface name or local address to bind
  std::string interface;
  // PLAIT_TCP_INTEGRITY: every frame authenticated
  bool integrity = false;

  static const size_t settings_index;  // core/settings_registry.h
};

}  // namespace plait::transport
