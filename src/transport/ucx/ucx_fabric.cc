#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_fabric.h"

#include "core/log.h"
#include "transport/ucx/ucx_provider.h"

namespace plait::transport {

Capabilities ucx_capabilities() {
  Capabilities c;
  c.provider = "ucx";
  c.own_memory = true;
  return c;
}

std::unique_ptr<Fabric> create_ucx_fabric(const FabricOptions& options) {
  return std::make_unique<ucx::UcxFabric>(options);
}

namespace ucx {

CostModel ucx_cost_model(const Config& config) {
  CostModel m;
  // Defaults for UCX over loopback tcp on a commodity host (`plait tune --providers ucx`
  // measures the fabric a job really has). The eager threshold only steers plait's own
  // choices: UCX picks eager or rendezvous per message itself (UCX_RNDV_THRESH).
  m.alpha_us = 10.0;
  m.beta_bytes_per_us = 3000.0;
  m.copy_bytes_per_us = 4000.0;
  m.eager_threshold = config.eager_threshold != 0 ? config.eager_threshold : size_t{64} << 10;
  return m;
}

UcxFabric::UcxFabric(const FabricOptions& options)
    : OpLifecycle(options.rank, options.size, "ucx", options.name),
      config_(options.config),
      capabilities_(ucx_capabilities()),
      cost_model_(ucx_cost_model(options.config)),
      registry_(options.registry ? options.registry : std::make_shared<MemoryRegistry>()) {
  const ErrorContext ctx{.rank = rank_, .op = "ucx fabric setup"};
  if (!options.store) throw invalid_usage("a fabric needs a store", ctx);
  matcher_.set_limits({.bytes = options.config.max_unexpected_bytes,
                       .messages = options.config.max_unexpected_messages});
  peers_.resize(size_);
  write_flushes_.resize(size_);
  if (options.peers.empty()) {
    for (int p = 0; p < size_; ++p)
      if (p != rank_) peers_[p] = std::make_unique<Peer>();
  } else {
    for (int p : options.peers) {
      if (p < 0 || p >= size_ || p == rank_)
        throw invalid_usage("peer " + std::to_string(p) + " is not another rank of " +
                                std::to_string(size_), ctx);
      peers_[p] = std::make_unique<Peer>();
    }
  }
  try {
    setup_worker(options);
    exchange_hellos(options);
  } catch (const Error& e) {
    // Peers that met us learn that we left (a goodbye), not a broken endpoint later.
    if (w_.worker && !w_.eps.empty() && !close_endpoints()) w_.abandon();
    throw e.with_context(ctx);
  }
  log(LogLevel::kInfo, "rank ", rank_, ": ucx fabric '", name_, "' over ",
      w_.transports.empty() ? "no peers" : w_.transports);
  start_progress();
  // Last: from here on every region of the registry (those registered before included) is
  // mapped for UCX.
  registry_->add_listener(this);
  listening_ = true;
}

UcxFabric::~UcxFabric() {
  alive_.reset();
  stop_reporting();
  stop_requested_.store(true);
  if (wake_fd_.valid()) wake_progress();
  if (progress_.joinable()) progress_.join();
  // The registry (shared, it may outlive us) stops telling us about regions; ours stay
  // registered for the other providers.
  if (listening_) registry_->remove_listener(this);
  const bool clean = close_endpoints();
  std::lock_guard lock(worker_mu_);
  if (!allocations_.empty())
    log(LogLevel::kWarn, "rank ", rank_, ": ", allocations_.size(),
        " region(s) from allocate_memory outlive their UCX fabric; their memory stays until "
        "the process exits (destroy regions before the fabric)");
  if (clean && allocations_.empty()) {
    forget_remote_regions();
    unmap_all();
  } else {
    w_.abandon();  // with its keys and mappings: UCX may still hold requests that use them
  }
  w_.reset();
  in_flight_.clear();
}

PeerHealth* UcxFabric::health_of(int rank) const {
  return rank >= 0 && rank < size_ ? peers_[rank].get() : nullptr;
}

std::unique_ptr<CompletionQueue> UcxFabric::create_cq() {
  return std::make_unique<PolicyCompletionQueue>(config_.wait_policy, config_.spin_time, this);
}

std::unique_ptr<MemoryRegion> UcxFabric::register_memory(void* addr, size_t length,
                                                         uint32_t access) {
  try {
    return std::make_unique<RegistryMemoryRegion>(registry_, registry_->add(addr, length, access));
  } catch (const Error& e) {
    throw e.with_context({.rank = rank_});
  }
}

void UcxFabric::set_imm_cq(CompletionQueue* cq) {
  set_imm_queue(cq);
}

bool UcxFabric::peer_failed(int peer) const {
  const PeerHealth* health = health_of(peer);
  return health && health->failed.load();
}

std::string UcxFabric::peer_failure(int peer) const {
  const PeerHealth* health = health_of(peer);
  return health && health->failed.load() ? health->reason() : std::string();
}

void UcxFabric::cancel(CompletionQueue* cq) {
  std::vector<OpRef> ops;
  {
    // Under the worker lock: a receive that an arrival matches moves from the matcher to the
    // op table inside a callback, which runs under it.
    std::lock_guard lock(worker_mu_);
    ops = ops_of(cq);
    for (OpRef& op : matcher_.posted_if([&](const Op& op) { return op.cq == cq; }))
      ops.push_back(std::move(op));
  }
  for (const OpRef& op : ops) fail(*op, aborted_error("cancelled", context_of(*op)));
  matcher_.purge_finished();
  // UCX may still read or write their buffers: not after we return.
  await_requests(ops);
  await_reports();
  await_user_memory_access();
}

}  // namespace ucx
}  // namespace plait::transport
