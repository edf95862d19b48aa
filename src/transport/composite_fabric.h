// The fabric a communicator actually gets: one provider per peer, chosen by host.
//
// create_fabric() learns every rank's host identity through the store, then gives the
// peers on this host to the shm provider and the others to tcp (PLAIT_TRANSPORT=tcp|shm
// forces one provider for all). When one provider serves every peer it is returned as is;
// otherwise a CompositeFabric routes each operation to its peer's provider. Both providers
// share one MemoryRegistry (a region has one key whichever provider a peer reaches it by)
// and complete into the same queues, which the composite creates so that waiting on them
// drives the shm provider inline.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/completion_queue.h"
#include "transport/fabric.h"

namespace plait::transport {

class CompositeFabric final : public Fabric, public InlineProgress {
 public:
  // route[peer] is the provider serving `peer` (null for our own rank); every provider in
  // `providers` must have been created with `registry`.
  CompositeFabric(const FabricOptions& options, std::vector<std::unique_ptr<Fabric>> providers,
                  std::vector<Fabric*> route, std::shared_ptr<MemoryRegistry> registry);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const Capabilities& capabilities() const override { return capabilities_; }
  // The slowest provider's model: what a collective crossing hosts pays.
  const CostModel& cost_model() const override { return cost_model_; }

  std::unique_ptr<CompletionQueue> create_cq() override;
  std::unique_ptr<MemoryRegion> register_memory(void* addr, size_t length,
                                                uint32_t access) override;
  // From the provider with memory of its own (ucx), if any: its peers gain, the others
  // reach that memory like any other.
  std::unique_ptr<MemoryRegion> allocate_memory(size_t length, uint32_t access) override;

  void send(int peer, const void* buf, size_t len, uint64_t tag, uint64_t header,
            CompletionQueue* cq, uint64_t context) override;
  void recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
            uint64_t context) override;
  void recv_any_sibling(void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                        uint64_t context, std::shared_ptr<std::atomic<bool>> sibling) override;
  void write(int peer, const void* local, size_t len, const RemoteKey& rk, uint64_t remote_offset,
             std::optional<uint32_t> imm, CompletionQueue* cq, uint64_t context) override;
  void read(int peer, void* local, size_t len, const RemoteKey& rk, uint64_t remote_offset,
            CompletionQueue* cq, uint64_t context) override;
  bool gathers_writes(int peer) const override;
  void write_gathered(int peer, const std::vector<LocalPiece>& pieces, const RemoteKey& rk,
                      uint64_t remote_offset, std::optional<uint32_t> imm, CompletionQueue* cq,
                      uint64_t context) override;
  void fetch_add(int peer, uint64_t* result, const RemoteKey& rk, uint64_t remote_offset,
                 uint64_t add, CompletionQueue* cq, uint64_t context) override;
  void compare_swap(int peer, uint64_t* result, const RemoteKey& rk, uint64_t remote_offset,
                    uint64_t expected, uint64_t desired, CompletionQueue* cq,
                    uint64_t context) override;
  void set_imm_cq(CompletionQueue* cq) override;
  void cancel(CompletionQueue* cq) override;
  bool peer_failed(int peer) const override;
  std::string peer_failure(int peer) const override;

  // InlineProgress: forwarded to the providers that support it.
  void begin_polling() override;
  void end_polling() override;
  void hand_off() override;
  bool progress() override;

 private:
  Fabric& provider_for(int peer, const char* op) const;

  const int rank_;
  const int size_;
  const Config config_;
  std::vector<std::unique_ptr<Fabric>> providers_;
  std::vector<Fabric*> route_;
  std::vector<InlineProgress*> inline_;  // providers that can be driven inline
  Fabric* allocator_ = nullptr;          // the provider with own_memory, if any
  std::shared_ptr<MemoryRegistry> registry_;
  Capabilities capabilities_;
  CostModel cost_model_;
};

}  // namespace plait::transport
