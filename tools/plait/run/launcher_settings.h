// `plait run`'s settings: how long stopped ranks get between SIGTERM and SIGKILL, and CPU binding.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "core/config.h"

namespace plait::cli {

struct LauncherSettings {
  // PLAIT_RUN_GRACE_S: SIGTERM -> SIGKILL
  std::chrono::milliseconds grace{3000};
  // PLAIT_BIND: none, auto, core. Not bound by default: a rank's helper
  // threads (the torch backend's completion thread) then need not share its core.
  std::string bind = "none";

  static const size_t settings_index;  // core/settings_registry.h
};

}  // namespace plait::cli
