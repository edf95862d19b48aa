// The ucx provider's settings (PLAIT_UCX_TLS).
#pragma once

#include <cstddef>
#include <string>

#include "core/config.h"

namespace plait::transport {

struct UcxSettings {
  // PLAIT_UCX_TLS: UCX transports (UCX_TLS syntax); empty = UCX's
  std::string tls;

  static const size_t settings_index;  // core/settings_registry.h
};

}  // namespace plait::transport
