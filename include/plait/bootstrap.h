// How a process learns who it is in a job (rank, size, local rank) and where the rendezvous
// store is, from the environment its launcher gave it: plait's own `plait run`, torchrun,
// Open MPI's mpirun, MPICH/Hydra, or Slurm's srun.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "plait/store.h"

namespace plait {

enum class Launcher { kPlait, kTorchrun, kOpenMpi, kMpich, kSlurm, kNone };
std::string_view to_string(Launcher launcher);

// What the environment says. Store location, in order of precedence:
//   PLAIT_STORE_PATH=dir        file store in a shared directory
//   PLAIT_STORE_ADDR=host:port  embedded TCP store (served by `plait run`)
//   MASTER_ADDR + MASTER_PORT   embedded TCP store hosted by rank 0 on
//                               PLAIT_STORE_PORT (default MASTER_PORT + 1, because torch's
//                               own TCPStore already listens on MASTER_PORT)
struct LaunchEnv {
  Launcher launcher = Launcher::kNone;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string store_path;  // file store directory, if any
  std::string store_host;  // TCP store, if any
  int store_port = 0;
  bool host_store = false;  // this rank serves the TCP store (rank 0 without a launcher store)
  std::string job_token;    // PLAIT_JOB_TOKEN; empty means "no token" (still checked equal)
};

// Reads the given environment (pass the process environment with environ_map()). Throws
// plait::Error(kInvalidUsage) naming the variable that is missing or malformed.
LaunchEnv detect_launch_env(const std::map<std::string, std::string>& env);
std::map<std::string, std::string> environ_map();

// Everything a communicator needs to start: identity and a store shared with the peers.
struct Bootstrap {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::shared_ptr<Store> store;
  std::string job_token;
  // The store's host, if it is a TCP store: the route to it picks the address this rank
  // advertises to its peers (unless PLAIT_TCP_IFNAME says otherwise).
  std::string store_host;
  std::shared_ptr<TcpStoreServer> store_server;  // held while this rank hosts the store
};

// detect_launch_env(environ_map()), then host and/or connect to the store. With no launcher
// at all this is a one-rank job with an in-process store.
Bootstrap bootstrap_from_env(std::chrono::milliseconds timeout);
Bootstrap bootstrap_from(const LaunchEnv& env, std::chrono::milliseconds timeout);

}  // namespace plait
