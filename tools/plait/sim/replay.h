// `plait sim <op> --topology SPEC --ranks N [--ranks-per-host M] [--algo A|all] --bytes B
//  [--chunk B] [--tune FILE] [--json FILE]`: a collective replayed on a modelled network.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "sim/replay.h"

namespace plait::cli {

struct SimRunOptions {
  std::string op;  // allreduce, reduce_scatter, ...
  std::string topology;
  int ranks = 0;
  int ranks_per_host = 1;
  std::string algo = "all";
  size_t bytes = 0;                   // as plait bench counts them (nccl-tests)
  size_t chunk_bytes = size_t{1} << 20;  // the pipelining unit, as PLAIT_CHUNK_BYTES
  std::string tune_file;
  std::string json;
  std::string plot;  // a PNG: sim/plot.h
  sim::ReplayMode replay = sim::ReplayMode::kAuto;  // --replay auto|full|symmetric
};

// A file for records nobody asked to keep (a plot's input): /tmp/plait-sim-XXXXXX.
std::string sim_temp_file();

struct SimRow {
  std::string algo;
  sim::ReplayResult result;
  size_t bytes = 0;
  double busbw_gbps = 0;
  bool model_choice = false;  // the cost model would pick this one
  double sim_seconds = 0;     // wall time the replay took here
  std::string skipped;        // why it was not replayed (algo "all": too big, not symmetric)
};

// Every algorithm plait has for `op` that is a schedule (the simulator can replay it).
std::vector<std::string> sim_algorithms(const std::string& op);
// Host constants from a `plait tune` file (empty: the defaults): shm for ranks of one host,
// tcp (else ucx) for the per-message cost across hosts, host for reductions and copies.
sim::SimParams params_from(const std::string& tune_file);
// Throws kInvalidUsage naming the bad option.
SimRunOptions parse_sim_run_args(const std::vector<std::string>& args);
// The cost model's choice for the call, as a communicator on that network would make it
// (empty algo, and the error as the reason, where it makes none).
struct ModelPick {
  std::string algo;
  std::string reason;
};
ModelPick cost_model_pick(const SimRunOptions& options);
// One row per algorithm (every applicable one for algo "all").
std::vector<SimRow> simulate(const SimRunOptions& options);
int sim_run_main(const std::vector<std::string>& args);
int sim_sweep_main(const std::vector<std::string>& args);

}  // namespace plait::cli
