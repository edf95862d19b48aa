// One-sided operations over the UCX provider, the target's side: its regions are mapped with
// ucp_mem_map when they are registered (on InfiniBand or RoCE that is the NIC's memory
// registration), their packed remote keys are handed to the peers that ask, and a
// deregistration revokes the key before the memory is let go.
//
// The registry's contract (once deregistration returns, nothing touches the region) holds
// although the target's CPU takes no part in an access: on_remove() tells every peer that
// holds the key to forget it; a peer drops the key, flushes its endpoint (every access it
// made with the key is then complete in our memory) and answers. Only when every live holder
// answered is the region unmapped and on_remove() done. A holder that does not answer within
// the bound is named, and the registry keeps the key reserved (the user must keep the memory).
// UCP delivers the active messages of one endpoint in order, so a key reply always reaches
// its peer before the revocation that follows it.
#include <algorithm>
#include <cstring>
#include <thread>

#include "core/clock.h"
#include "core/log.h"
#include "transport/allocated_memory.h"
#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_fabric.h"

namespace plait::transport::ucx {
namespace {

unsigned protection_of(uint32_t access) {
  unsigned prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE;
  if (access & (kAccessRemoteRead | kAccessRemoteAtomic)) prot |= UCP_MEM_MAP_PROT_REMOTE_READ;
  if (access & (kAccessRemoteWrite | kAccessRemoteAtomic)) prot |= UCP_MEM_MAP_PROT_REMOTE_WRITE;
  return prot;
}

}  // namespace

std::unique_ptr<MemoryRegion> UcxFabric::allocate_memory(size_t length, uint32_t access) {
  const ErrorContext ctx{.rank = rank_, .op = "allocate_memory", .bytes = static_cast<int64_t>(length)};
  if (length == 0) throw invalid_usage("allocate_memory: length 0", ctx);
  ucp_mem_h memh = nullptr;
  void* addr = nullptr;
  {
    std::lock_guard lock(worker_mu_);
    ucp_mem_map_params_t p{};
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                   UCP_MEM_MAP_PARAM_FIELD_PROT;
    p.length = length;
    p.flags = UCP_MEM_MAP_ALLOCATE;
    // Every region registered inside it shares this handle; plait checks each one's access.
    p.prot = protection_of(kAccessAll);
    ucs_status_t s = ucx().ucp_mem_map(w_.context, &p, &memh);
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    if (s == UCS_OK) s = ucx().ucp_mem_query(memh, &attr);
    if (s != UCS_OK) {
      if (memh) ucx().ucp_mem_unmap(w_.context, memh);
      memh = nullptr;
      log(LogLevel::kWarn, "rank ", rank_, ": UCX could not allocate ", length,
          " bytes (", ucx().ucs_status_string(s), "); using anonymous memory");
    } else {
      addr = attr.address;
      // UCX hands out its allocators' memory as it comes; the contract says zeroed.
      std::memset(addr, 0, length);
      allocations_[reinterpret_cast<uintptr_t>(addr)] = {memh, length};
    }
  }
  // Registration takes the worker lock again (on_add).
  if (!memh) return Fabric::allocate_memory(length, access);
  auto release = [this, alive = std::weak_ptr<int>(alive_), addr, memh] {
    if (alive.expired()) return;
    std::lock_guard lock(worker_mu_);
    allocations_.erase(reinterpret_cast<uintptr_t>(addr));
    ucx().ucp_mem_unmap(w_.context, memh);
  };
  std::unique_ptr<MemoryRegion> registration;
  try {
    registration = register_memory(addr, length, access);
  } catch (...) {
    release();
    throw;
  }
  return std::make_unique<OwningMemoryRegion>(std::move(registration), std::move(release));
}

void UcxFabric::on_add(const RegionRef& region) {
  LocalRegion r;
  r.region = region;
  std::lock_guard lock(worker_mu_);
  const auto base = reinterpret_cast<uintptr_t>(region->base());
  if (auto a = allocations_.upper_bound(base); region->length() > 0 && a != allocations_.begin()) {
    --a;
    if (base - a->first <= a->second.length &&
        region->length() <= a->second.length - (base - a->first)) {
      r.memh = a->second.memh;
      r.owns_memh = false;
    }
  }
  if (region->length() > 0) {
    ucs_status_t s = UCS_OK;
    if (!r.memh) {
      ucp_mem_map_params_t p{};
      p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                     UCP_MEM_MAP_PARAM_FIELD_PROT;
      p.address = region->base();
      p.length = region->length();
      p.prot = protection_of(region->access());
      s = ucx().ucp_mem_map(w_.context, &p, &r.memh);
    }
    if (s == UCS_OK) s = ucx().ucp_rkey_pack(w_.context, r.memh, &r.packed, &r.packed_bytes);
    if (s != UCS_OK) {
      // Refused at the first access rather than at registration: the other providers of a
      // job may serve this region.
      r.map_error = "key " + format_key(region->key()) + ": UCX could not map the region of " +
                    std::to_string(region->length()) + " bytes: " + ucx().ucs_status_string(s);
      log(LogLevel::kWarn, "rank ", rank_, ": ", r.map_error);
    }
  }
  local_regions_.emplace(region->key(), std::move(r));
}

std::string UcxFabric::on_remove(const RegionRef& region) {
  const uint64_t key = region->key();
  {
    std::lock_guard lock(worker_mu_);
    auto it = local_regions_.find(key);
    if (it == local_regions_.end()) return {};
    LocalRegion& r = it->second;
    r.removing = true;         // from now on the key is refused (as the registry does)
    if (!r.holders.empty()) {  // a first call: tell them (a repeated call waits again)
      KeyRevoke k;
      k.source = rank_;
      k.key = key;
      for (int peer : r.holders) {
        if (peers_[peer]->failed.load()) continue;
        r.revoking.insert(peer);
        InFlight in;
        in.header = bytes_of(k);
        send_tracked(peer, kAmKeyRevoke, std::move(in), nullptr, 0, nullptr,
                     UCP_AM_SEND_FLAG_EAGER);
      }
      r.holders.clear();
    }
  }
  // A peer answers once its flush is done: a few round trips, unless it is stopped or stuck.
  const auto bound = std::min<std::chrono::milliseconds>(config_.timeout, std::chrono::seconds(30));
  const Deadline deadline = Deadline::after(bound);
  for (unsigned round = 0;; ++round) {
    std::string pending;
    {
      std::lock_guard lock(worker_mu_);
      drain_locked();  // the progress thread may sleep; the answers need the worker
      LocalRegion& r = local_regions_.at(key);
      std::erase_if(r.revoking, [&](int peer) { return peers_[peer]->failed.load(); });
      if (r.revoking.empty()) {
        unmap(r);
        local_regions_.erase(key);
        return {};
      }
      for (int peer : r.revoking)
        pending += (pending.empty() ? "rank " : ", rank ") + std::to_string(peer);
    }
    if (deadline.expired())
      return pending + " has not confirmed the revocation of its UCX remote key after " +
             std::to_string(bound.count()) + " ms (stopped or stuck?)";
    std::this_thread::sleep_for(std::chrono::microseconds(round < 100 ? 20 : 500));
  }
}

void UcxFabric::unmap(LocalRegion& r) {
  if (r.packed) ucx().ucp_rkey_buffer_release(r.packed);
  if (r.memh && r.owns_memh) ucx().ucp_mem_unmap(w_.context, r.memh);
  r.packed = nullptr;
  r.memh = nullptr;
}

void UcxFabric::unmap_all() {
  for (auto& [key, r] : local_regions_) unmap(r);
  local_regions_.clear();
}

ucs_status_t UcxFabric::on_key_request(void* arg, const void* header, size_t header_bytes, void*,
                                       size_t, const ucp_am_recv_param_t*) {
  auto& f = *static_cast<UcxFabric*>(arg);
  KeyRequest q;
  if (!read_header(header, header_bytes, &q)) return UCS_OK;
  const int source = f.checked_source(q.source, "key request");
  if (source < 0 || f.peers_[source]->failed.load()) return UCS_OK;
  KeyReply k;
  k.source = f.rank_;
  k.key = q.key;
  InFlight in;
  auto it = f.local_regions_.find(q.key);
  if (it == f.local_regions_.end() || it->second.removing || !it->second.map_error.empty()) {
    const std::string why = it == f.local_regions_.end() || it->second.removing
                                ? unregistered_denial(q.key)
                                : it->second.map_error;
    k.denied = 1;
    in.payload.assign(why.begin(), why.begin() + std::min(why.size(), kMaxDenialBytes));
  } else {
    LocalRegion& r = it->second;
    const RegionRef& region = r.region;
    k.base = reinterpret_cast<uint64_t>(region->base());
    k.length = region->length();
    k.access = region->access();
    const char* packed = static_cast<const char*>(r.packed);
    in.payload.assign(packed, packed + r.packed_bytes);
    r.holders.insert(source);
  }
  in.header = bytes_of(k);
  const void* data = in.payload.data();
  const size_t bytes = in.payload.size();
  f.send_tracked(source, kAmKeyReply, std::move(in), data, bytes, nullptr,
                 UCP_AM_SEND_FLAG_EAGER);
  return UCS_OK;
}

ucs_status_t UcxFabric::on_key_revoked(void* arg, const void* header, size_t header_bytes, void*,
                                       size_t, const ucp_am_recv_param_t*) {
  auto& f = *static_cast<UcxFabric*>(arg);
  KeyRevoke k;
  if (!read_header(header, header_bytes, &k)) return UCS_OK;
  const int source = f.checked_source(k.source, "key revocation answer");
  if (source < 0) return UCS_OK;
  if (auto it = f.local_regions_.find(k.key); it != f.local_regions_.end())
    it->second.revoking.erase(source);
  return UCS_OK;
}

ucs_status_t UcxFabric::on_imm(void* arg, const void* header, size_t header_bytes, void*, size_t,
                               const ucp_am_recv_param_t*) {
  auto& f = *static_cast<UcxFabric*>(arg);
  ImmHeader h;
  if (!read_header(header, header_bytes, &h)) return UCS_OK;
  const int source = f.checked_source(h.source, "immediate");
  if (source < 0 || f.peers_[source]->failed.load()) return UCS_OK;
  f.deliver_imm(source, h.key, h.offset, h.length, h.imm);
  ImmDone d;
  d.source = f.rank_;
  d.op = h.op;
  InFlight in;
  in.header = bytes_of(d);
  f.send_tracked(source, kAmImmDone, std::move(in), nullptr, 0, nullptr, UCP_AM_SEND_FLAG_EAGER);
  return UCS_OK;
}

}  // namespace plait::transport::ucx
