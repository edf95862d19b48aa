// `plait bench ps`: the parameter server's push, pull and push_pull over a size sweep, with
// k servers and w workers: the slowest worker's time per call, per-worker and aggregate
// bandwidth, CPU-seconds per GB (every thread of every rank), and the cost model's ideal
// max(n/beta, w*n/(k*beta)) beside the measurement, beta measured on the same fabric.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace plait::cli {

struct PsBenchOptions {
  int nranks = 0;        // -n: launch a local job of this many ranks
  int servers = 1;       // --servers k: the last k ranks serve
  std::string op = "push_pull";  // push | pull | push_pull
  std::string mode = "bsp";      // bsp | asp | ssp
  int staleness = 0;
  size_t min_bytes = 4096;
  size_t max_bytes = size_t{16} << 20;
  double factor = 4.0;
  int iters = 0;   // 0: calibrated per size (~0.2 s)
  int warmup = 3;
  int depth = 1;   // calls in flight
  bool check = false;
  std::string json_path;
  std::vector<std::string> forwarded_args;
  bool help = false;
};

PsBenchOptions parse_ps_bench_args(const std::vector<std::string>& args);
std::string ps_bench_usage();
// argv after "bench ps".
int ps_bench_main(const std::vector<std::string>& args);

}  // namespace plait::cli
