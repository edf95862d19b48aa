#include "transport/composite_fabric.h"

#include <algorithm>

#include "core/clock.h"
#include "core/log.h"
#include "transport/host_identity.h"
#include "transport/memory_registry.h"
#include "transport/tuned_costs.h"
#include "transport/ucx/ucx_info.h"

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

CompositeFabric::CompositeFabric(const FabricOptions& options,
                                 std::vector<std::unique_ptr<Fabric>> providers,
                                 std::vector<Fabric*> route,
                                 std::shared_ptr<MemoryRegistry> registry)
    : rank_(options.rank),
      size_(options.size),
      config_(options.config),
      providers_(std::move(providers)),
      route_(std::move(route)),
      registry_(std::move(registry)) {
  capabilities_.provider.clear();
  for (auto& p : providers_) {
    const Capabilities& c = p->capabilities();
    capabilities_.provider += (capabilities_.provider.empty() ? "" : "+") + c.provider;
    capabilities_.tagged &= c.tagged;
    capabilities_.rma &= c.rma;
    capabilities_.write_imm &= c.write_imm;
    capabilities_.atomics &= c.atomics;
    capabilities_.any_source &= c.any_source;
    capabilities_.streams_per_peer = std::max(capabilities_.streams_per_peer, c.streams_per_peer);
    if (auto* in = dynamic_cast<InlineProgress*>(p.get())) inline_.push_back(in);
    if (c.own_memory && !allocator_) allocator_ = p.get();
    capabilities_.own_memory |= c.own_memory;
    if (p->cost_model().alpha_us >= cost_model_.alpha_us || &p == &providers_.front())
      cost_model_ = p->cost_model();
  }
}

Fabric& CompositeFabric::provider_for(int peer, const char* op) const {
  if (peer < 0 || peer >= size_ || route_[peer] == nullptr)
    throw invalid_usage("peer " + std::to_string(peer) + " is not another rank of this fabric (size " +
                            std::to_string(size_) + ")",
                        {.rank = rank_, .peer = peer, .op = op});
  return *route_[peer];
}

std::unique_ptr<CompletionQueue> CompositeFabric::create_cq() {
  return std::make_unique<PolicyCompletionQueue>(config_.wait_policy, config_.spin_time,
                                                 inline_.empty() ? nullptr : this);
}

std::unique_ptr<MemoryRegion> CompositeFabric::register_memory(void* addr, size_t length,
                                                               uint32_t access) {
  try {
    return std::make_unique<RegistryMemoryRegion>(registry_, registry_->add(addr, length, access));
  } catch (const Error& e) {
    throw e.with_context({.rank = rank_, .op = "register_memory"});
  }
}

std::unique_ptr<MemoryRegion> CompositeFabric::allocate_memory(size_t length, uint32_t access) {
  return allocator_ ? allocator_->allocate_memory(length, access)
                    : Fabric::allocate_memory(length, access);
}

void CompositeFabric::send(int peer, const void* buf, size_t len, uint64_t tag, uint64_t header,
                           CompletionQueue* cq, uint64_t context) {
  provider_for(peer, "send").send(peer, buf, len, tag, header, cq, context);
}

void CompositeFabric::recv(int peer, void* buf, size_t capacity, uint64_t tag,
                           CompletionQueue* cq, uint64_t context) {
  if (peer != kAnySource) {
    provider_for(peer, "recv").recv(peer, buf, capacity, tag, cq, context);
    return;
  }
  // Posted on every provider; the first copy to match takes the message (see
  // Fabric::recv_any_sibling).
  auto sibling = std::make_shared<std::atomic<bool>>(false);
  for (auto& p : providers_) p->recv_any_sibling(buf, capacity, tag, cq, context, sibling);
}

void CompositeFabric::recv_any_sibling(void* buf, size_t capacity, uint64_t tag,
                                       CompletionQueue* cq, uint64_t context,
                                       std::shared_ptr<std::atomic<bool>> sibling) {
  for (auto& p : providers_) p->recv_any_sibling(buf, capacity, tag, cq, context, sibling);
}

void CompositeFabric::write(int peer, const void* local, size_t len, const RemoteKey& rk,
                            uint64_t remote_offset, std::optional<uint32_t> imm,
                            CompletionQueue* cq, uint64_t context) {
  provider_for(peer, "write").write(peer, local, len, rk, remote_offset, imm, cq, context);
}

void CompositeFabric::read(int peer, void* local, size_t len, const RemoteKey& rk,
                           uint64_t remote_offset, CompletionQueue* cq, uint64_t context) {
  provider_for(peer, "read").read(peer, local, len, rk, remote_offset, cq, context);
}

void CompositeFabric::fetch_add(int peer, uint64_t* result, const RemoteKey& rk,
                                uint64_t remote_offset, uint64_t add, CompletionQueue* cq,
                                uint64_t context) {
  provider_for(peer, "fetch_add").fetch_add(peer, result, rk, remote_offset, add, cq, context);
}

void CompositeFabric::compare_swap(int peer, uint64_t* result, const RemoteKey& rk,
                                   uint64_t remote_offset, uint64_t expected, uint64_t desired,
                                   CompletionQueue* cq, uint64_t context) {
  provider_for(peer, "compare_swap")
      .compare_swap(peer, result, rk, remote_offset, expected, desired, cq, context);
}

void CompositeFabric::set_imm_cq(CompletionQueue* cq) {
  for (auto& p : providers_) p->set_imm_cq(cq);
}

void CompositeFabric::cancel(CompletionQueue* cq) {
  for (auto& p : providers_) p->cancel(cq);
}

bool CompositeFabric::peer_failed(int peer) const {
  if (peer < 0 || peer >= size_ || route_[peer] == nullptr) return false;
  return route_[peer]->peer_failed(peer);
}

std::string CompositeFabric::peer_failure(int peer) const {
  if (peer < 0 || peer >= size_ || route_[peer] == nullptr) return {};
  return route_[peer]->peer_failure(peer);
}

void CompositeFabric::begin_polling() {
  for (InlineProgress* p : inline_) p->begin_polling();
}

void CompositeFabric::end_polling() {
  for (InlineProgress* p : inline_) p->end_polling();
}

void CompositeFabric::hand_off() {
  for (InlineProgress* p : inline_) p->hand_off();
}

bool CompositeFabric::progress() {
  bool any = false;
  for (InlineProgress* p : inline_) any |= p->progress();
  return any;
}

}  // namespace plait::transport
