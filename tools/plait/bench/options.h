// The command line of `plait bench`: parsed once into BenchOptions, before any rank starts,
// so a bad option is reported once and exits 2 without launching a job.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "plait/types.h"

#include "plait/bench/ops.h"

namespace plait::cli {

struct BenchOptions {
  BenchOp op = BenchOp::kAllreduce;
  size_t min_bytes = 8;
  size_t max_bytes = size_t{64} << 20;
  double factor = 2.0;
  DataType dtype = DataType::kF32;
  ReduceOp redop = ReduceOp::kSum;
  std::string algo = "auto";  // CallOptions::algorithm; validated by coll::parse_algorithm
  int root = 0;
  // 0: calibrated per size so the timed loop lasts about kCalibratedSeconds, at least
  // kMinCalibratedIters (nccl-tests' -n, chosen for you).
  int iters = 0;
  int warmup = 5;
  bool check = false;
  bool in_place = false;
  // --sync: a barrier before each timed call, each call timed on its own (as OSU's
  // benchmarks do), instead of calls back to back (as nccl-tests).
  bool sync = false;
  std::string json_path;
  // -n N: launch N local ranks running `bench` with `forwarded_args`. 0: run in this job.
  int nranks = 0;
  std::vector<std::string> forwarded_args;  // every argument except -n N
  bool help = false;
};

inline constexpr double kCalibratedSeconds = 0.2;
inline constexpr int kMinCalibratedIters = 5;
inline constexpr int kMaxCalibratedIters = 100000;

// Parses the arguments after the word `bench`. Throws plait::Error(kInvalidUsage) naming the
// option and what it accepts.
BenchOptions parse_bench_args(const std::vector<std::string>& args);

// The sizes in bytes of the sweep: min, min*factor, ... while below max, then max itself.
// Strictly increasing even when factor rounds down (each step grows by at least one byte).
std::vector<size_t> size_sweep(size_t min_bytes, size_t max_bytes, double factor);

// Iterations for the timed loop given the measured time of one call (max over ranks).
int calibrated_iters(double seconds_per_call);

std::string bench_usage();

}  // namespace plait::cli
