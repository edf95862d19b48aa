// The shm provider's settings (PLAIT_SHM_CMA).
#pragma once

#include <cstddef>
#include <string>

#include "core/config.h"

namespace plait::transport {

struct ShmSettings {
  // PLAIT_SHM_CMA: auto|on|off, cross-memory attach
  std::string cma = "auto";

  static const size_t settings_index;  // core/settings_registry.h
};

}  // namespace plait::transport
