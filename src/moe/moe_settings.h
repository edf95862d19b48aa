// Expert parallelism's settings (PLAIT_MOE_*).
#pragma once

#include <string>

#include "core/config.h"

namespace plait::moe {

struct MoeSettings {
  // PLAIT_MOE_PATH: "auto" (the cost model), "alltoallv" or "one-sided"
  std::string path = "auto";

  static const size_t settings_index;  // core/settings_registry.h
};

}  // namespace plait::moe
