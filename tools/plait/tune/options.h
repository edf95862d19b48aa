// The command line of `plait tune`: parsed once, before any rank starts, so a bad option is
// reported once and exits 2 without launching a job.
#pragma once

#include <string>
#include <vector>

namespace plait::cli {

struct TuneOptions {
  // -n N: launch N local ranks running `tune` with `forwarded_args`. 0: not given, which
  // means "2" outside a job and "this job's ranks" inside one (plait run, torchrun, ...).
  int nranks = 0;
  std::vector<std::string> providers = {"shm", "tcp"};  // measured in this order
  std::string out;     // empty: tune_file_path() (PLAIT_TUNE_FILE or the cache directory)
  bool quick = false;  // few sizes and repetitions: a smoke test, not a measurement
  bool verbose = false;  // per-size medians next to the fitted line
  bool help = false;
  // --topology SPEC: no measurement, the network's contention on SPEC for jobs of `ranks`
  // ranks, `ranks_per_host` a host (plait sim's model), into the tune file.
  std::string topology;
  int ranks = 0;
  int ranks_per_host = 1;
  std::vector<std::string> forwarded_args;  // every argument except -n N
};

// The providers `--providers` accepts.
inline constexpr const char* kTunableProviders[] = {"shm", "tcp", "ucx"};

// Throws plait::Error(kInvalidUsage) naming the offending argument.
TuneOptions parse_tune_args(const std::vector<std::string>& args);
std::string tune_usage();

}  // namespace plait::cli
