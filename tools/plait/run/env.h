// The environment of each rank of a local job: the launcher's own, plus what torchrun gives
// (so torch.distributed and scripts written for torchrun work unchanged) and what plait's
// bootstrap reads (include/plait/bootstrap.h).
#pragma once

#include <string>
#include <vector>

#include "core/socket.h"

namespace plait::cli {

struct JobIdentity {
  int world_size = 1;
  std::string store_host;  // the launcher's embedded store
  int store_port = 0;
  std::string job_token;
  int master_port = 0;  // for torch's own TCPStore, distinct from the store's port
  int restart_count = 0;  // how many times the job was restarted before this start
  int max_restarts = 0;
  std::string stall_requests;  // the file SIGUSR1's stall-report requests are counted in
};

// `inherited` ("KEY=value" entries, e.g. current_environment()) with every variable the
// launcher sets replaced by its value for `rank`.
std::vector<std::string> rank_environment(const std::vector<std::string>& inherited,
                                          const JobIdentity& job, int rank);

std::vector<std::string> current_environment();

// A TCP port on `host` for the ranks' MASTER_PORT (torch's store, which rank 0 binds later),
// held by a bound socket that does not listen: while `held` lives, no other launcher's
// port-0 pick on this machine gets the same port. (A pick that let go of it at once could
// hand it to a concurrent job too; two jobs whose rank 0s raced for one port then shared one
// torch store, and one job's ranks read the other's keys.)
struct PortReservation {
  net::Fd held;
  int port = 0;
};
PortReservation reserve_free_port(const std::string& host);

}  // namespace plait::cli
