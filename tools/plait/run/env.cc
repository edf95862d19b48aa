#include "plait/run/env.h"

#include <unistd.h>

#include <map>

#include "core/socket.h"

extern char** environ;

namespace plait::cli {

std::vector<std::string> rank_environment(const std::vector<std::string>& inherited,
                                          const JobIdentity& job, int rank) {
  // Every rank of a local job is on one host (one group), so local and global ranks agree.
  const std::string r = std::to_string(rank);
  const std::string n = std::to_string(job.world_size);
  const std::map<std::string, std::string> set = {
      {"RANK", r},
      {"WORLD_SIZE", n},
      {"LOCAL_RANK", r},
      {"LOCAL_WORLD_SIZE", n},
      {"GROUP_RANK", "0"},
      {"GROUP_WORLD_SIZE", "1"},
      {"ROLE_RANK", r},
      {"ROLE_WORLD_SIZE", n},
      {"MASTER_ADDR", job.store_host},
      {"MASTER_PORT", std::to_string(job.master_port)},
      {"PLAIT_RANK", r},
      {"PLAIT_WORLD_SIZE", n},
      {"PLAIT_LOCAL_RANK", r},
      {"PLAIT_LOCAL_SIZE", n},
      {"PLAIT_STORE_ADDR", job.store_host + ":" + std::to_string(job.store_port)},
      {"PLAIT_JOB_TOKEN", job.job_token},
      // Which start of the job this is (plait run --max-restarts), under torchrun's names too.
      {"PLAIT_RESTART_COUNT", std::to_string(job.restart_count)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(job.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(job.max_restarts)},
      {"PLAIT_STALL_REQUESTS", job.stall_requests},
  };

  std::vector<std::string> env;
  env.reserve(inherited.size() + set.size());
  for (const std::string& entry : inherited) {
    const std::string key = entry.substr(0, entry.find('='));
    // An outer job's store settings would take precedence over the store this job hosts.
    if (key == "PLAIT_STORE_PATH" || key == "PLAIT_STORE_PORT") continue;
    if (!set.contains(key)) env.push_back(entry);
  }
  for (const auto& [key, value] : set) env.push_back(key + "=" + value);
  return env;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  return env;
}

PortReservation reserve_free_port(const std::string& host) {
  PortReservation r;
  r.held = net::bind_tcp(host, 0);
  r.port = net::local_port(r.held.get());
  return r;
}

}  // namespace plait::cli
