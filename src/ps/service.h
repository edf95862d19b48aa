// What both roles of the parameter server know about the job: who serves, who works, and the
// service's settings.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "plait/ps.h"

namespace plait::ps {

struct Service {
  Consistency consistency = Consistency::kBsp;
  int staleness = 0;
  int backup_workers = 0;      // kBsp: a round needs workers - backup_workers pushes
  bool fold_late = false;      // kBsp backup: a late push joins the next round, not dropped
  size_t slot_bytes = 0;       // one ring slot: the largest partition
  uint32_t slots = 4;          // per worker and server
  size_t window_bytes = 0;     // push bytes a worker keeps on the wire (0: slots only)
  std::chrono::milliseconds timeout{300000};
  std::vector<int> servers;    // fabric ranks, by server index
  std::vector<int> workers;    // fabric ranks, by worker index
  std::vector<int> role_index; // per fabric rank: its index among the servers or workers

  int num_workers() const { return static_cast<int>(workers.size()); }
  int round_size() const { return num_workers() - backup_workers; }
  int num_servers() const { return static_cast<int>(servers.size()); }
};

// How often the completion threads look at deadlines and peers' health.
inline constexpr std::chrono::milliseconds kHealthCheck{100};

}  // namespace plait::ps
