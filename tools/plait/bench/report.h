// What `plait bench` prints: a header, an nccl-tests style table (one row per size), the
// average bus bandwidth, and with --json one JSON object per line per size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"

namespace plait::cli {

// One measured size, as every rank agreed on it (time is the slowest rank's).
struct BenchRecord {
  std::string op;
  std::string algo;   // the algorithm that ran (the cost model's choice under "auto")
  std::string dtype;  // "f32"
  std::string redop;  // "sum", or "none" for ops that do not reduce
  int root = -1;      // -1 for ops without a root
  size_t bytes = 0;   // nccl-tests' size
  size_t count = 0;   // elements per rank
  int ranks = 1;
  int iters = 0;
  bool in_place = false;
  double time_us = 0;  // per call, the mean over the timed loop
  // Per call, a call lasting from the end of the one before on the last rank to finish it to
  // its own end on the last rank: one slow call (a TCP retransmission timeout) shows here and
  // leaves the median alone.
  double min_us = 0;
  double median_us = 0;
  double max_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  // CPU time (user + sys, every thread of every rank) during the timed loop, so that spin
  // and block waits can be compared on energy, not only on time.
  double cpu_us_per_op = 0;
  std::optional<int64_t> wrong;  // set only with --check

  // CPU-seconds per GB of `bytes` moved; unset for zero-byte ops (barrier).
  std::optional<double> cpu_s_per_gb() const;
};

// min_us, median_us and max_us from each call's seconds (the median of an even count is the
// mean of the middle two); all 0 for none.
void fill_call_times(BenchRecord& record, std::vector<double> call_seconds);

// algbw = bytes / time in GB/s (1e9 bytes/s), busbw = algbw * factor.
void fill_bandwidth(BenchRecord& record, double busbw_factor);

// "# plait bench: allreduce, 2 ranks, f32, sum, algo auto, iters ..." and the column names.
std::string format_header(const std::string& op, int ranks, const std::string& dtype,
                          const std::string& redop, const std::string& algo,
                          const std::string& iters, int warmup, bool check, bool in_place,
                          bool sync);
// "# settings: PLAIT_TCP_INTEGRITY=1 PLAIT_TRANSPORT=tcp\n": what this run set that is not a
// default (empty when nothing is), so that a table says what it measured.
std::string format_settings(const Config& config);
std::string format_table_header();
std::string format_table_row(const BenchRecord& record);
// "# Avg bus bandwidth: X GB/s" over the rows (0 for none).
std::string format_average(const std::vector<BenchRecord>& records);
// One line of JSON, no trailing newline. "wrong" is null without --check.
std::string format_json_line(const BenchRecord& record);

}  // namespace plait::cli
