// The parameter server's settings (PLAIT_PS_*, but PLAIT_PS_ROOTS, which is the ps allreduce
// algorithm's): servers, largest partition placed on one server, largest chunk moved at once,
// ring slots per worker and server, the push window, and how its completion threads wait.
#pragma once

#include <cstddef>
#include <string>

#include "core/config.h"

namespace plait::ps {

struct PsSettings {
  // PLAIT_PS_SERVERS
  int servers = 1;
  // PLAIT_PS_PARTITION (placement unit)
  size_t partition_bytes = size_t{4} << 20;
  // PLAIT_PS_CHUNK (transfer unit, ring slot)
  size_t chunk_bytes = size_t{256} << 10;
  // PLAIT_PS_SLOTS
  int slots = 8;
  // PLAIT_PS_WINDOW (0: no window)
  size_t window_bytes = size_t{2} << 20;
  // PLAIT_PS_WAIT
  WaitPolicy wait = WaitPolicy::kHybrid;

  static const size_t settings_index;  // core/settings_registry.h
};

}  // namespace plait::ps
