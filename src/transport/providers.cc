#include "transport/providers.h"

#include <algorithm>

#include "core/clock.h"
#include "core/log.h"
#include "transport/composite_fabric.h"
#include "transport/host_identity.h"
#include "transport/memory_registry.h"
#include "transport/shm/shm_provider.h"
#include "transport/tcp/tcp_provider.h"
#include "transport/tuned_costs.h"
#include "transport/ucx/ucx_info.h"
#include "transport/ucx/ucx_provider.h"

namespace plait::transport {
namespace {

std::string host_key(const std::string& name, int rank) {
  return name + "/host/" + std::to_string(rank);
}

std::string rdma_key(const std::string& name, int rank) {
  return name + "/rdma/" + std::to_string(rank);
}

// Every rank's value under `key_of(rank)`, ours published as `mine`, waiting for the ones not
// yet published within connect_timeout.
std::vector<std::string> exchange_identities(const FabricOptions& o, const std::string& my_key,
                                             const std::string& mine) {
  o.store->set(my_key, mine);
  // Our key with our rank's number replaced by each rank's.
  const std::string stem = my_key.substr(0, my_key.rfind('/') + 1);
  std::vector<std::string> keys;
  for (int r = 0; r < o.size; ++r) keys.push_back(stem + std::to_string(r));
  try {
    o.store->wait(keys, o.config.connect_timeout);
  } catch (const Error& e) {
    std::vector<int> missing;
    for (int r = 0; r < o.size; ++r)
      if (!o.store->check(keys[r])) missing.push_back(r);
    std::string ranks;
    for (int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    throw timeout_error("timed out after " + std::to_string(o.config.connect_timeout.count()) +
                            " ms: rank(s) " + ranks + " never joined (" + e.message() + ")",
                        {.rank = o.rank, .op = "fabric setup"});
  }
  std::vector<std::string> ids(o.size);
  for (int r = 0; r < o.size; ++r)
    ids[r] = o.store->get_string(keys[r], std::chrono::milliseconds(0));
  return ids;
}

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

int FabricTopology::hosts() const {
  return host_of.empty() ? 1 : *std::max_element(host_of.begin(), host_of.end()) + 1;
}

std::unique_ptr<Fabric> create_fabric(const FabricOptions& options, FabricTopology* topology) {
  const ErrorContext ctx{.rank = options.rank, .op = "fabric setup"};
  if (!options.store) throw invalid_usage("a fabric needs a store", ctx);
  const std::string& choice = options.config.transport;
  // Published as "<host identity>\n<machine identity>" (neither holds a newline).
  std::vector<std::string> ids = exchange_identities(
      options, host_key(options.name, options.rank),
      host_identity(options.config) + "\n" + machine_identity());
  std::vector<std::string> machines(ids.size());
  for (size_t r = 0; r < ids.size(); ++r) {
    const size_t cut = ids[r].find('\n');
    if (cut == std::string::npos) continue;
    machines[r] = ids[r].substr(cut + 1);
    ids[r].resize(cut);
  }
  std::vector<int> host_of = host_indices(ids);
  // In auto mode, ranks on different hosts meet over UCX when both have an RDMA NIC that
  // UCX drives. Asked only of a job that spans hosts (every rank sees the same identities,
  // so all of them ask, or none): a one-host job never loads UCX.
  std::vector<bool> rdma(ids.size(), false);
  const bool several_hosts =
      std::any_of(host_of.begin(), host_of.end(), [&](int h) { return h != host_of[0]; });
  if (choice == "auto" && several_hosts) {
    const std::vector<std::string> flags = exchange_identities(
        options, rdma_key(options.name, options.rank), ucx::ucx_sees_rdma(options.config) ? "rdma" : "-");
    for (size_t r = 0; r < flags.size(); ++r) rdma[r] = flags[r] == "rdma";
  }

  std::vector<int> local, remote, over_ucx;
  for (int r = 0; r < options.size; ++r) {
    if (r == options.rank) continue;
    bool same_host = host_of[r] == host_of[options.rank];
    if (choice == "shm" && !same_host)
      throw invalid_usage("PLAIT_TRANSPORT=shm, but rank " + std::to_string(r) +
                              " is on another host (" + ids[r] + ", this rank is on " +
                              ids[options.rank] + ")",
                          {.rank = options.rank, .peer = r, .op = "fabric setup"});
    if (choice == "ucx" || (choice == "shm+ucx" && !same_host) ||
        (choice == "auto" && !same_host && rdma[r] && rdma[options.rank]))
      over_ucx.push_back(r);
    else
      (choice == "tcp" || !same_host ? remote : local).push_back(r);
  }

  auto registry = std::make_shared<MemoryRegistry>();
  std::vector<std::unique_ptr<Fabric>> providers;
  std::vector<Fabric*> route(options.size, nullptr);
  std::vector<std::string> provider(options.size, "self");
  FabricTopology topo{.host = ids, .host_of = host_of, .machine_of = host_indices(machines)};
  // Each provider gets its own store scope; the shm one first, so that a local failure is
  // reported before ranks on other hosts are waited for.
  if (!local.empty()) {
    FabricOptions o = options;
    o.name = options.name + "/shm";
    o.peers = local;
    o.registry = registry;
    providers.push_back(create_shm_fabric(o));
    for (int r : local) route[r] = providers.back().get(), provider[r] = "shm";
    topo.intra = providers.back()->cost_model();
  }
  if (!over_ucx.empty() || (options.size == 1 && choice == "ucx")) {
    FabricOptions o = options;
    o.name = options.name + "/ucx";
    o.peers = over_ucx;
    o.registry = registry;
    if (over_ucx.empty()) o.peers = {};  // a single rank: a fabric with nobody to reach
    providers.push_back(create_ucx_fabric(o));
    for (int r : over_ucx) route[r] = providers.back().get(), provider[r] = "ucx";
    topo.inter = providers.back()->cost_model();
    if (local.empty()) topo.intra = topo.inter;
  }
  if (!remote.empty() || (options.size == 1 && choice != "ucx")) {
    FabricOptions o = options;
    o.name = options.name + "/tcp";
    o.peers = remote;
    o.registry = registry;
    providers.push_back(create_tcp_fabric(o));
    for (int r : remote) route[r] = providers.back().get(), provider[r] = "tcp";
    topo.inter = providers.back()->cost_model();
    if (local.empty()) topo.intra = topo.inter;
  }
  if (remote.empty() && over_ucx.empty()) topo.inter = topo.intra;
  topo.provider = provider;
  apply_tuned_topology(options, topo);  // measured constants (plait tune), rank 0's for all
  if (log_enabled(LogLevel::kInfo))
    log(LogLevel::kInfo, "rank ", options.rank, ": ", topo.hosts(), " host(s); ",
        local.empty() ? "" : "shm to ranks " + rank_ranges(local) + (remote.empty() ? "" : ", "),
        remote.empty() ? "" : "tcp to ranks " + rank_ranges(remote) + (over_ucx.empty() ? "" : ", "),
        over_ucx.empty() ? "" : "ucx to ranks " + rank_ranges(over_ucx),
        local.empty() && remote.empty() && over_ucx.empty() ? "no peers" : "");
  if (topology) *topology = std::move(topo);
  if (providers.size() == 1) return std::move(providers.front());
  return std::make_unique<CompositeFabric>(options, std::move(providers), std::move(route),
                                           std::move(registry));
}

std::vector<Capabilities> provider_capabilities(const Config& config) {
  return {shm_capabilities(config), tcp_capabilities(config), ucx_capabilities()};
}

}  // namespace plait::transport
