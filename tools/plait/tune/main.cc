// `plait tune`: measures alpha and beta of each provider between two ranks, and the host's
// reduction and copy bandwidths, then writes them to the tune file that the fabric setup
// reads (src/transport/tuned_costs.h). Without the file the built-in defaults apply.
//
// Each provider is measured through a communicator created with PLAIT_TRANSPORT forced to
// it, with communicator send/recv: the cost model wants what a collective step costs as
// plait executes it (engine, completion queues, wake-ups), not the raw provider.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "coll/select/select.h"
#include "core/config.h"
#include "plait/bootstrap.h"
#include "plait/commands.h"
#include "plait/communicator.h"
#include "plait/error.h"
#include "plait/tune/measure.h"
#include "plait/tune/network.h"
#include "plait/tune/options.h"
#include "transport/tuned_costs.h"

namespace plait::cli {
namespace {

// A provider that cannot start must fail fast, not after the default two minutes.
constexpr const char* kTuneConnectTimeout = "20s";

// Sets an environment variable for the scope of one measurement (Communicator::create reads
// its Config from the environment); restores the previous value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value, bool keep_existing = false)
      : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (!(keep_existing && old_)) ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

struct ProviderResult {
  std::string provider;
  std::string skipped;  // why it was not measured; empty when it was
  transport::LinkFit fit;
  std::vector<transport::LatencySample> samples;  // rank 0's
};

// Every rank posts its status of `step`; returns the first failure, "rank R: why", or "".
// Through the store, because after a failure there may be no working communicator.
std::string agree(Store& store, const std::string& step, int rank, int size,
                  const std::string& failure, std::chrono::milliseconds timeout) {
  store.set(step + "/" + std::to_string(rank), failure.empty() ? "ok" : "failed:" + failure);
  for (int r = 0; r < size; ++r) {
    const std::string status = store.get_string(step + "/" + std::to_string(r), timeout);
    if (status == "ok") continue;
    // An Error's text usually names its rank already.
    const std::string who = "rank " + std::to_string(r) + ": ";
    const std::string why = status.substr(std::string_view("failed:").size());
    return why.starts_with(who) ? why : who + why;
  }
  return {};
}

ProviderResult measure_provider(const Bootstrap& boot, Store& store, const std::string& provider,
                                const TuneOptions& options) {
  ProviderResult result{.provider = provider};
  ScopedEnv transport("PLAIT_TRANSPORT", provider);
  ScopedEnv connect("PLAIT_CONNECT_TIMEOUT", kTuneConnectTimeout, /*keep_existing=*/true);
  // The fabric setup reads the tune file (apply_tuned_topology); the file this run replaces
  // must not stop it, malformed or not, so the measured communicators see an empty one.
  ScopedEnv no_tuning("PLAIT_TUNE_FILE", "/dev/null");
  // Longer than any rank can spend failing to connect.
  const auto timeout = Config::from_env().connect_timeout + std::chrono::seconds(30);

  std::shared_ptr<Communicator> comm;
  std::string failure;
  try {
    comm = Communicator::create(boot, {.name = "plait-tune-" + provider});
  } catch (const Error& e) {
    failure = e.what();
  }
  result.skipped = agree(store, provider + "/created", boot.rank, boot.size, failure, timeout);
  if (!result.skipped.empty()) return result;

  // A failure here aborts the communicator on every rank, so all of them get here.
  try {
    result.samples = ping_pong(*comm, ping_pong_plan(options.quick));
    comm->barrier()->wait();  // nobody tears down its connections while a peer still sends
  } catch (const Error& e) {
    failure = e.what();
  }
  result.skipped = agree(store, provider + "/measured", boot.rank, boot.size, failure, timeout);
  if (result.skipped.empty() && boot.rank == 0)
    result.fit = transport::fit_alpha_beta(result.samples);
  return result;
}

struct SegmentResult {
  std::string skipped;  // why it was not measured; empty when it was
  double round_us = 0;  // rank 0's
};

// The round of a collective over the shared segment, on every rank of the job (they all
// share a host when plait tune runs them with -n).
SegmentResult measure_segment(const Bootstrap& boot, Store& store, const TuneOptions& options) {
  SegmentResult result;
  ScopedEnv no_tuning("PLAIT_TUNE_FILE", "/dev/null");
  ScopedEnv connect("PLAIT_CONNECT_TIMEOUT", kTuneConnectTimeout, /*keep_existing=*/true);
  const auto timeout = Config::from_env().connect_timeout + std::chrono::seconds(30);
  std::string failure;
  try {
    auto comm = Communicator::create(boot, {.name = "plait-tune-segment"});
    result.round_us = segment_round_us(*comm, options.quick);
  } catch (const Error& e) {
    failure = e.what();
  }
  result.skipped = agree(store, "segment/measured", boot.rank, boot.size, failure, timeout);
  return result;
}

// The largest size the switch-over search looks at (a cost model that still picks the
// segment there is reported as "64M+").
constexpr size_t kSwitchSearchMax = size_t{64} << 20;

// "512", "64K", "16M": sizes are powers of two here.
std::string size_text(size_t bytes) {
  if (bytes >= (size_t{1} << 20)) return std::to_string(bytes >> 20) + "M";
  if (bytes >= (size_t{1} << 10)) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

// Where the cost model, with the constants just measured, stops choosing the shm algorithm
// for an allreduce of f32 on `ranks` ranks of one host: the largest power of two it still
// takes, in bytes (0: not even 4 bytes).
size_t shm_switch_over(const transport::CostModel& shm_link, double flag_us, int ranks,
                       bool oversubscribed) {
  const Config config = Config::from_env({});
  const coll::CostParams params{.alpha_us = shm_link.alpha_us,
                                .beta_bytes_per_us = shm_link.beta_bytes_per_us,
                                .gamma_bytes_per_us = shm_link.gamma_bytes_per_us,
                                .copy_bytes_per_us = shm_link.copy_bytes_per_us,
                                .flag_us = flag_us};
  coll::CollArgs args;
  args.op = coll::CollOp::kAllreduce;
  args.size = ranks;
  args.chunk_count = (size_t{1} << 20) / 4;
  args.segment_slot_bytes = oversubscribed ? size_t{1} << 20 : size_t{64} << 10;  // as auto
  size_t last = 0;
  for (size_t bytes = 4; bytes <= kSwitchSearchMax; bytes *= 2) {
    args.count = bytes / 4;
    if (coll::select_algorithm(args, "auto", config, params).info->algorithm == coll::Algorithm::kShm)
      last = bytes;
  }
  return last;
}

// Four significant digits: the measurement's noise is larger than that.
double rounded(double value) {
  if (value <= 0) return value;
  const double scale = std::pow(10.0, 3 - std::floor(std::log10(value)));
  return std::round(value * scale) / scale;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("model name")) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "unknown cpu";
}

std::string file_header(const std::vector<ProviderResult>& results, const TuneOptions& options,
                        int ranks, const std::string& kept) {
  char host[256] = "unknown";
  ::gethostname(host, sizeof host - 1);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::string measured;
  for (const ProviderResult& r : results)
    if (r.skipped.empty()) measured += r.provider + ", ";
  std::string header = "Written by `plait tune` (plait " PLAIT_VERSION ") on " +
                       std::string(date) + (options.quick ? " with --quick (rough values)" : "") +
                       "\nmachine: " + host + ", " + cpu_model() + ", " +
                       std::to_string(std::thread::hardware_concurrency()) + " cpus; " +
                       std::to_string(ranks) + " ranks\nmeasured: " + measured + "host\n";
  if (!kept.empty()) header += "kept from the previous file: " + kept + "\n";
  return header +
         "alpha_us: one-way latency (us); *_bytes_per_us: bandwidth (1000 = 1 GB/s); "
         "flag_us: a round of a collective over the shared segment (us)\n";
}

void print_report(const std::vector<ProviderResult>& results, const HostRates& host,
                  const SegmentResult& segment, bool verbose) {
  std::printf("%-9s %10s %10s %6s %12s\n", "provider", "alpha_us", "beta_GB/s", "sizes",
              "round_trips");
  for (const ProviderResult& r : results) {
    if (!r.skipped.empty()) {
      std::printf("%-9s skipped: %s\n", r.provider.c_str(), r.skipped.c_str());
      continue;
    }
    std::printf("%-9s %10.3f %10.3f %6zu %12zu\n", r.provider.c_str(), r.fit.alpha_us,
                r.fit.beta_bytes_per_us / 1000, r.fit.sizes, r.fit.samples);
  }
  std::printf("%-9s reduce (f32 sum) %.2f GB/s, memcpy %.2f GB/s\n", "host",
              host.gamma_bytes_per_us / 1000, host.copy_bytes_per_us / 1000);
  if (!segment.skipped.empty()) {
    std::printf("%-9s skipped: %s\n", "segment", segment.skipped.c_str());
  } else {
    std::printf("%-9s a round of the shm algorithm (one-round barrier) %.3f us\n", "segment",
                segment.round_us);
    transport::CostModel shm_link;
    for (const ProviderResult& r : results)
      if (r.provider == "shm" && r.skipped.empty()) {
        shm_link.alpha_us = r.fit.alpha_us;
        shm_link.beta_bytes_per_us = r.fit.beta_bytes_per_us;
      }
    shm_link.gamma_bytes_per_us = host.gamma_bytes_per_us;
    shm_link.copy_bytes_per_us = host.copy_bytes_per_us;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::printf("%-9s allreduce f32 runs on the segment up to (cost model):", "switch");
    for (int ranks : {2, 4, 8, 16}) {
      const size_t bytes = shm_switch_over(shm_link, segment.round_us, ranks, ranks > cores);
      std::printf(" np=%d %s%s", ranks,
                  (size_text(bytes) + (bytes == kSwitchSearchMax ? "+" : "")).c_str(),
                  ranks > cores ? " (oversubscribed)" : "");
    }
    std::printf("\n");
  }
  if (!verbose) return;
  for (const ProviderResult& r : results) {
    if (!r.skipped.empty()) continue;
    std::printf("\n%s: one-way time per size, median of the round trips / 2, against the fit\n",
                r.provider.c_str());
    std::printf("  %10s %8s %12s %12s\n", "bytes", "samples", "median_us", "fit_us");
    std::map<size_t, std::vector<double>> by_size;  // the samples of a size are interleaved
    for (const transport::LatencySample& sample : r.samples)
      by_size[sample.bytes].push_back(sample.seconds * 1e6);
    for (auto& [n, us] : by_size) {
      const size_t count = us.size();
      std::printf("  %10zu %8zu %12.2f %12.2f\n", n, count, transport::median(us),
                  r.fit.alpha_us + static_cast<double>(n) / r.fit.beta_bytes_per_us);
    }
  }
}

// Rank 0: the previous file's values, this run's on top.
void write_file(const std::string& path, const std::vector<ProviderResult>& results,
                const HostRates& host, const SegmentResult& segment, const TuneOptions& options,
                int ranks) {
  transport::TunedCosts previous;
  try {
    previous = transport::load_tuned_costs_file(path);
  } catch (const Error& e) {
    std::printf("replacing unusable %s (%s)\n", path.c_str(), e.message().c_str());
  }
  transport::TunedCosts costs;
  for (const ProviderResult& r : results) {
    if (!r.skipped.empty()) continue;
    costs.set(r.provider, "alpha_us", rounded(r.fit.alpha_us));
    costs.set(r.provider, "beta_bytes_per_us", rounded(r.fit.beta_bytes_per_us));
  }
  costs.set(transport::kHostScope, "gamma_bytes_per_us", rounded(host.gamma_bytes_per_us));
  costs.set(transport::kHostScope, "copy_bytes_per_us", rounded(host.copy_bytes_per_us));
  if (segment.skipped.empty())
    costs.set(transport::kHostScope, "flag_us", rounded(segment.round_us));
  // A provider skipped or left out of --providers this time keeps its earlier measurement.
  std::string kept;
  for (const auto& [key, value] : previous.values()) {
    const size_t dot = key.find('.');
    if (costs.get(key.substr(0, dot), key.substr(dot + 1))) continue;
    costs.set(key.substr(0, dot), key.substr(dot + 1), value);
    kept += (kept.empty() ? "" : ", ") + key;
  }
  transport::save_tuned_costs(path, costs, file_header(results, options, ranks, kept));
  std::printf("wrote %s\n", path.c_str());
}

std::string out_path(const TuneOptions& options) {
  if (!options.out.empty()) return options.out;
  const std::string path = transport::tune_file_path(Config::from_env());
  if (path.empty())
    throw invalid_usage("no tune file to write: neither PLAIT_TUNE_FILE, XDG_CACHE_HOME nor "
                        "HOME is set; pass --out FILE");
  return path;
}

int run_tune(const TuneOptions& options) {
  const Config config = Config::from_env();
  const Bootstrap boot = bootstrap_from_env(config.connect_timeout);
  if (boot.size < 2)
    throw invalid_usage("plait tune measures between two ranks, this job has " +
                        std::to_string(boot.size) + " (plait tune -n 2)");
  const std::string path = boot.rank == 0 ? out_path(options) : "";
  PrefixStore store("plait-tune", boot.store);
  std::vector<ProviderResult> results;
  for (const std::string& provider : options.providers)
    results.push_back(measure_provider(boot, store, provider, options));
  const SegmentResult segment = measure_segment(boot, store, options);
  if (boot.rank != 0) return 0;

  // The host's rates, after the ping-pongs so that no peer competes for the cores.
  const HostRates host = measure_host(host_plan(options.quick));
  print_report(results, host, segment, options.verbose);
  write_file(path, results, host, segment, options, boot.size);
  std::fflush(stdout);
  for (const ProviderResult& r : results)
    if (r.skipped.empty()) return 0;
  std::fprintf(stderr, "plait tune: no provider could be measured (the reasons are above)\n");
  return 1;
}

// True inside a job started by plait run, torchrun, mpirun or srun: this process is a rank.
bool inside_job() { return detect_launch_env(environ_map()).launcher != Launcher::kNone; }

}  // namespace

int tune_main(int argc, char** argv) {
  TuneOptions options;
  try {
    options = parse_tune_args(std::vector<std::string>(argv, argv + argc));
  } catch (const Error& e) {
    std::fprintf(stderr, "plait tune: %s\n(plait tune --help for usage)\n", e.what());
    return 2;
  }
  if (options.help) {
    std::fputs(tune_usage().c_str(), stdout);
    return 0;
  }
  try {
    if (!options.topology.empty()) return run_tune_network(options, out_path(options));
    if (options.nranks > 0 || !inside_job()) {
      out_path(options);  // a usage error now, not after launching the ranks
      std::vector<std::string> command = {"/proc/self/exe", "tune"};
      command.insert(command.end(), options.forwarded_args.begin(), options.forwarded_args.end());
      return launch_local_job(options.nranks > 0 ? options.nranks : 2, command);
    }
    return run_tune(options);
  } catch (const Error& e) {
    std::fprintf(stderr, "plait tune: %s\n", e.what());
    return e.category() == ErrorCategory::kInvalidUsage ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plait tune: %s\n", e.what());
    return 1;
  }
}

}  // namespace plait::cli
