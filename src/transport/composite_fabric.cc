#include "transport/composite_fabric.h"

#include <algorithm>

#include "transport/memory_registry.h"

namespace plait::transport {

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

bool CompositeFabric::gathers_writes(int peer) const {
  return peer >= 0 && peer < size_ && route_[peer] != nullptr && route_[peer]->gathers_writes(peer);
}

void CompositeFabric::write_gathered(int peer, const std::vector<LocalPiece>& pieces,
                                     const RemoteKey& rk, uint64_t remote_offset,
                                     std::optional<uint32_t> imm, CompletionQueue* cq,
                                     uint64_t context) {
  provider_for(peer, "write_gathered").write_gathered(peer, pieces, rk, remote_offset, imm, cq, context);
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
