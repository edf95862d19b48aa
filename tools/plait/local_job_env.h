// The environment of each rank of a local job: the launcher's own, plus what torchrun gives
// (so torch.distributed and scripts written for torchrun work unchanged) and what plait's
// bootstrap reads (include/plait/bootstrap.h).
#pragma once

#include <string>
#include <vector>

namespace plait::cli {

struct JobIdentity {
  int world_size = 1;
  std::string store_host;  // the launcher's embedded store
  int store_port = 0;
  std::string job_token;
  int master_port = 0;  // for torch's own TCPStore, distinct from the store's port
  int restart_count = 0;  // how many times the job was restarted before this start
  int max_restarts = 0;
};

// `inherited` ("KEY=value" entries, e.g. current_environment()) with every variable the
// launcher sets replaced by its value for `rank`.
std::vector<std::string> rank_environment(const std::vector<std::string>& inherited,
                                          const JobIdentity& job, int rank);

std::vector<std::string> current_environment();

// A TCP port on `host` that nothing listens on right now. Like torchrun's, the answer can go
// stale before the rank binds it; it is only a good guess.
int pick_free_port(const std::string& host);

}  // namespace plait::cli
