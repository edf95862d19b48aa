// `plait tune --topology SPEC --ranks N [--ranks-per-host M]`: what a job cannot measure from
// inside, the contention of the network it runs on, computed by the simulator from a model of
// that network and written to the tune file's "net" scope, beside the measured constants (which
// it keeps). A job on that network reads it as it reads them, and its cost model then knows
// that, say, recursive doubling's far exchanges collide on a fat tree's cores.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "plait/error.h"
#include "plait/tune/network.h"
#include "sim/contention.h"
#include "sim/topology_spec.h"
#include "transport/tuned_costs.h"

namespace plait::cli {
namespace {

// Four significant digits: the model's rates are not more exact than that.
double rounded(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return std::strtod(buf, nullptr);
}

}  // namespace

int run_tune_network(const TuneOptions& options, const std::string& path) {
  const auto topology = sim::parse_topology(options.topology);
  if (options.ranks < 2) throw invalid_usage("--topology needs --ranks N (N >= 2): the ranks of the jobs it serves");
  const int hosts = (options.ranks + options.ranks_per_host - 1) / options.ranks_per_host;
  if (hosts > topology->hosts())
    throw invalid_usage(std::to_string(options.ranks) + " ranks at " + std::to_string(options.ranks_per_host) +
                        " a host need " + std::to_string(hosts) + " hosts; " + topology->spec() + " has " +
                        std::to_string(topology->hosts()));
  const sim::Contention c = sim::contention_of(*topology, hosts, options.ranks_per_host);

  transport::TunedCosts previous;
  try {
    previous = transport::load_tuned_costs_file(path);
  } catch (const Error& e) {
    std::printf("replacing unusable %s (%s)\n", path.c_str(), e.message().c_str());
  }
  transport::TunedCosts costs;
  for (const auto& [key, value] : previous.values()) {  // every measured value; no old "net"
    const size_t dot = key.find('.');
    if (key.substr(0, dot) != transport::kNetworkScope) costs.set(key.substr(0, dot), key.substr(dot + 1), value);
  }
  std::printf("# plait tune --topology %s: %d hosts (%d ranks, %d a host)\n", topology->spec().c_str(), hosts,
              options.ranks, options.ranks_per_host);
  std::printf("%-28s %s\n", "pattern", "contention (a flow's time over its time alone)");
  uint64_t d = 1;
  for (double v : c.hypercube) {
    costs.set(transport::kNetworkScope, std::string(transport::kContentionAt) + std::to_string(d), rounded(v));
    std::printf("hosts %-6llu apart (xor)       %.3f\n", static_cast<unsigned long long>(d), v);
    d *= 2;
  }
  costs.set(transport::kNetworkScope, transport::kRingContention, rounded(c.ring));
  std::printf("%-28s %.3f\n", "ring (next host)", c.ring);

  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const std::string header = "Written by `plait tune --topology " + topology->spec() + " --ranks " +
                             std::to_string(options.ranks) + " --ranks-per-host " +
                             std::to_string(options.ranks_per_host) + "` (plait " PLAIT_VERSION ") on " + date +
                             "\nnet.*: the network's contention, computed by plait sim; the rest as measured before\n";
  transport::save_tuned_costs(path, costs, header);
  std::printf("wrote %s\n", path.c_str());
  return 0;
}

}  // namespace plait::cli
