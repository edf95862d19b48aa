// apply_tuned_topology(): one set of measured constants for every rank of a job.
//
// Algorithm selection runs on every rank independently and must agree (algorithms.h), yet
// each rank could read a different tune file (other hosts, other HOME) or find none. So rank 0
// reads its file and publishes it through the fabric's store; every rank applies that copy.
#include <algorithm>
#include <sstream>

#include "core/log.h"
#include "transport/providers.h"
#include "transport/tuned_costs.h"

namespace plait::transport {
namespace {

// Store value: "ok\n<path>\n<found 0|1>\n<file text>" or "error\n<category>\n<message>".
std::string encode(const TunedCosts& costs) {
  return "ok\n" + costs.path + "\n" + (costs.found ? "1" : "0") + "\n" +
         format_tuned_costs(costs, "");
}

std::string encode(const Error& e) {
  return "error\n" + std::to_string(static_cast<int>(e.category())) + "\n" + e.message();
}

// Splits off the text up to the next newline.
std::string take_line(std::string& text) {
  const size_t end = text.find('\n');
  std::string line = text.substr(0, end);
  text.erase(0, end == std::string::npos ? text.size() : end + 1);
  return line;
}

TunedCosts decode(std::string value, const ErrorContext& ctx) {
  const std::string kind = take_line(value);
  if (kind == "error") {
    const int category = std::stoi(take_line(value));
    throw Error(static_cast<ErrorCategory>(category), value,
                {.rank = ctx.rank, .op = "fabric setup: rank 0's tune file"});
  }
  TunedCosts costs;
  const std::string path = take_line(value);
  const bool found = take_line(value) == "1";
  costs = parse_tuned_costs(value, "rank 0's " + path);
  costs.path = path;
  costs.found = found;
  return costs;
}

// Rank 0's costs: read on rank 0, fetched from the store elsewhere.
TunedCosts job_tuned_costs(const FabricOptions& o, const ErrorContext& ctx) {
  const std::string key = o.name + "/tuned-costs";
  if (o.rank == 0) {
    TunedCosts costs;
    try {
      costs = load_tuned_costs(o.config);
    } catch (const Error& e) {
      // The others learn why instead of waiting for a value that never comes.
      if (o.size > 1 && o.store) o.store->set(key, encode(e));
      throw e.with_context(ctx);
    }
    if (o.size > 1 && o.store) o.store->set(key, encode(costs));
    return costs;
  }
  std::string value;
  try {
    value = o.store->get_string(key, o.config.connect_timeout);
  } catch (const Error& e) {
    throw timeout_error("rank 0 never published its tune constants (" + e.message() + ")", ctx);
  }
  return decode(std::move(value), ctx);
}

}  // namespace

void apply_tuned_topology(const FabricOptions& options, FabricTopology& topology) {
  const ErrorContext ctx{.rank = options.rank, .op = "fabric setup: tune file"};
  const TunedCosts costs = job_tuned_costs(options, ctx);
  if (costs.empty()) return;
  const auto& p = topology.provider;
  const bool any_shm = std::find(p.begin(), p.end(), "shm") != p.end();
  const bool any_tcp = std::find(p.begin(), p.end(), "tcp") != p.end();
  const bool any_ucx = std::find(p.begin(), p.end(), "ucx") != p.end();
  // Between hosts ucx is chosen only where it drives an RDMA NIC: it is the link that
  // matters then. On one host, shm unless every peer is reached another way.
  const std::string intra = any_shm ? "shm" : any_ucx && !any_tcp ? "ucx" : "tcp";
  const std::string inter = any_ucx ? "ucx" : any_tcp ? "tcp" : intra;
  topology.intra = apply_tuned(topology.intra, costs, intra);
  topology.inter = apply_tuned(topology.inter, costs, inter);
  // The network's contention, where `plait tune --topology` wrote it.
  for (uint64_t d = 1; d <= (uint64_t{1} << 40); d *= 2) {
    auto v = costs.get(kNetworkScope, std::string(kContentionAt) + std::to_string(d));
    if (!v) break;
    topology.inter.host_contention.push_back(*v);
  }
  if (auto v = costs.get(kNetworkScope, kRingContention)) topology.inter.ring_contention = *v;
  if (options.rank == 0 && log_enabled(LogLevel::kInfo)) {
    std::ostringstream text;
    text << "cost model from " << costs.path << ": " << intra << " alpha "
         << topology.intra.alpha_us << " us, beta " << topology.intra.beta_bytes_per_us
         << " B/us";
    if (inter != intra)
      text << "; " << inter << " alpha " << topology.inter.alpha_us << " us, beta "
           << topology.inter.beta_bytes_per_us << " B/us";
    text << "; gamma " << topology.intra.gamma_bytes_per_us << " B/us";
    if (!topology.inter.host_contention.empty()) {
      text << "; network contention at 1, 2, 4, ... hosts apart";
      for (double c : topology.inter.host_contention) text << " " << c;
      text << ", ring " << topology.inter.ring_contention;
    }
    log_line(LogLevel::kInfo, text.str());
  }
}

}  // namespace plait::transport
