// plait::rdma::Fabric: the transport's Fabric behind the public one-sided API. The queue and
// region types are the transport's own (fabric.h derives from or aliases the public ones), so
// a call here is one argument check and one virtual call into the provider.
#include <cstring>

#include "core/config_overlay.h"
#include "core/log.h"
#include "plait/rdma.h"
#include "plait/store.h"
#include "transport/fabric.h"
#include "transport/job_fabric.h"

namespace plait::rdma {

std::string_view to_string(OpType op) {
  switch (op) {
    case OpType::kSend: return "send";
    case OpType::kRecv: return "recv";
    case OpType::kWrite: return "write";
    case OpType::kRead: return "read";
    case OpType::kFetchAdd: return "fetch_add";
    case OpType::kCompareSwap: return "compare_swap";
    case OpType::kRemoteWriteImm: return "remote write_imm";
  }
  return "unknown op";
}

namespace {

class PublicFabric final : public Fabric {
 public:
  PublicFabric(std::unique_ptr<transport::Fabric> fabric,
               std::shared_ptr<transport::FabricTopology> topology, std::shared_ptr<Store> store,
               std::chrono::milliseconds timeout)
      : fabric_(std::move(fabric)),
        topology_(std::move(topology)),
        store_(std::move(store)),
        timeout_(timeout) {}

  int rank() const override { return fabric_->rank(); }
  int size() const override { return fabric_->size(); }
  std::string provider(int peer) const override {
    check_rank(peer, "provider");
    return topology_->provider.empty() ? "self" : topology_->provider[peer];
  }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  std::unique_ptr<CompletionQueue> create_cq() override { return fabric_->create_cq(); }
  std::unique_ptr<MemoryRegion> register_memory(void* addr, size_t length,
                                                uint32_t access) override {
    if (!addr || length == 0)
      throw invalid_usage("register_memory: null or empty range",
                          {.rank = rank(), .op = "register_memory", .bytes = static_cast<int64_t>(length)});
    if ((access & ~static_cast<uint32_t>(kAccessAll)) != 0)
      throw invalid_usage("register_memory: unknown access flags " + std::to_string(access),
                          {.rank = rank(), .op = "register_memory"});
    return fabric_->register_memory(addr, length, access);
  }
  std::unique_ptr<MemoryRegion> allocate_memory(size_t length, uint32_t access) override {
    if (length == 0)
      throw invalid_usage("allocate_memory: length 0", {.rank = rank(), .op = "allocate_memory"});
    if ((access & ~static_cast<uint32_t>(kAccessAll)) != 0)
      throw invalid_usage("allocate_memory: unknown access flags " + std::to_string(access),
                          {.rank = rank(), .op = "allocate_memory"});
    return fabric_->allocate_memory(length, access);
  }

  std::vector<std::vector<RemoteKey>> exchange(const std::vector<RemoteKey>& mine) override {
    // Every rank's n-th exchange uses the same keys: exchange is collective.
    const std::string round = "exchange/" + std::to_string(exchanges_++);
    Bytes bytes(mine.size() * sizeof(RemoteKey));
    if (!mine.empty()) std::memcpy(bytes.data(), mine.data(), bytes.size());
    store_->set(round + "/" + std::to_string(rank()), bytes);
    std::vector<std::vector<RemoteKey>> all(size());
    for (int r = 0; r < size(); ++r) {
      Bytes theirs;
      try {
        theirs = store_->get(round + "/" + std::to_string(r), timeout_);
      } catch (const Error& e) {
        throw e.with_context({.rank = rank(), .peer = r, .op = "rdma exchange"});
      }
      if (theirs.size() != bytes.size())
        throw invalid_usage("rdma exchange: rank " + std::to_string(r) + " gave " +
                                std::to_string(theirs.size() / sizeof(RemoteKey)) +
                                " descriptors, this rank " + std::to_string(mine.size()) +
                                " (every rank must give the same number)",
                            {.rank = rank(), .peer = r, .op = "rdma exchange"});
      all[r].resize(mine.size());
      if (!theirs.empty()) std::memcpy(all[r].data(), theirs.data(), theirs.size());
    }
    return all;
  }

  void send(int peer, const void* buf, size_t len, uint64_t tag, uint64_t header,
            CompletionQueue& cq, uint64_t context) override {
    fabric_->send(peer, buf, len, tag, header, queue(cq, "send"), context);
  }
  void recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue& cq,
            uint64_t context) override {
    fabric_->recv(peer, buf, capacity, tag, queue(cq, "recv"), context);
  }
  void write(int peer, const void* local, size_t len, const RemoteKey& remote, uint64_t offset,
             std::optional<uint32_t> imm, CompletionQueue& cq, uint64_t context) override {
    fabric_->write(peer, local, len, remote, offset, imm, queue(cq, "write"), context);
  }
  void read(int peer, void* local, size_t len, const RemoteKey& remote, uint64_t offset,
            CompletionQueue& cq, uint64_t context) override {
    fabric_->read(peer, local, len, remote, offset, queue(cq, "read"), context);
  }
  bool gathers_writes(int peer) const override {
    check_rank(peer, "gathers_writes");
    return fabric_->gathers_writes(peer);
  }
  void write_gathered(int peer, const std::vector<LocalPiece>& pieces, const RemoteKey& remote,
                      uint64_t offset, std::optional<uint32_t> imm, CompletionQueue& cq,
                      uint64_t context) override {
    fabric_->write_gathered(peer, pieces, remote, offset, imm, queue(cq, "write_gathered"), context);
  }
  void fetch_add(int peer, uint64_t* result, const RemoteKey& remote, uint64_t offset,
                 uint64_t add, CompletionQueue& cq, uint64_t context) override {
    fabric_->fetch_add(peer, result, remote, offset, add, queue(cq, "fetch_add"), context);
  }
  void compare_swap(int peer, uint64_t* result, const RemoteKey& remote, uint64_t offset,
                    uint64_t expected, uint64_t desired, CompletionQueue& cq,
                    uint64_t context) override {
    fabric_->compare_swap(peer, result, remote, offset, expected, desired,
                          queue(cq, "compare_swap"), context);
  }
  void set_imm_cq(CompletionQueue* cq) override {
    fabric_->set_imm_cq(cq ? queue(*cq, "set_imm_cq") : nullptr);
  }
  void cancel(CompletionQueue& cq) override { fabric_->cancel(queue(cq, "cancel")); }
  bool peer_failed(int peer) const override {
    check_rank(peer, "peer_failed");
    return fabric_->peer_failed(peer);
  }
  std::string peer_failure(int peer) const override {
    check_rank(peer, "peer_failure");
    return fabric_->peer_failure(peer);
  }

 private:
  // Queues come from create_cq(); a user's own CompletionQueue subclass cannot carry
  // completions of the provider.
  transport::CompletionQueue* queue(CompletionQueue& cq, const char* op) const {
    transport::CompletionQueue* q = transport::CompletionQueue::of(cq);
    if (!q)
      throw invalid_usage("completion queue was not created by a plait fabric",
                          {.rank = rank(), .op = op});
    return q;
  }
  void check_rank(int peer, const char* op) const {
    if (peer < 0 || peer >= size())
      throw invalid_usage("rank " + std::to_string(peer) + " is not in this fabric (size " +
                              std::to_string(size()) + ")",
                          {.rank = rank(), .op = op});
  }

  std::unique_ptr<transport::Fabric> fabric_;
  std::shared_ptr<transport::FabricTopology> topology_;
  std::shared_ptr<Store> store_;
  const std::chrono::milliseconds timeout_;
  uint64_t exchanges_ = 0;
};

}  // namespace

std::unique_ptr<Fabric> Fabric::create(const Bootstrap& bootstrap, const FabricOptions& options) {
  transport::check_bootstrap(bootstrap);
  if (options.name.empty()) throw invalid_usage("rdma::FabricOptions::name is empty");
  set_log_rank(bootstrap.rank);
  const Config config = config_with_settings(options.settings, "rdma::FabricOptions::settings",
                                             "fabric", {.rank = bootstrap.rank, .op = "create fabric"});
  transport::JobFabric job = transport::create_job_fabric(bootstrap, "rdma/" + options.name, config);
  return std::make_unique<PublicFabric>(std::move(job.fabric), std::move(job.topology),
                                        std::move(job.store), config.timeout);
}

std::vector<RemoteKey> Fabric::exchange(const RemoteKey& mine) {
  std::vector<std::vector<RemoteKey>> all = exchange(std::vector<RemoteKey>{mine});
  std::vector<RemoteKey> out;
  out.reserve(all.size());
  for (const auto& keys : all) out.push_back(keys[0]);
  return out;
}

}  // namespace plait::rdma
