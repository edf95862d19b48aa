#include "transport/memory_registry.h"

#include <cstdio>
#include <random>

#include "core/log.h"
#include "plait/error.h"

namespace plait::transport {
namespace {

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint32_t needed_flag(AccessKind kind) {
  switch (kind) {
    case AccessKind::kWrite: return kAccessRemoteWrite;
    case AccessKind::kRead: return kAccessRemoteRead;
    case AccessKind::kAtomic: return kAccessRemoteAtomic;
  }
  return kAccessAll;
}

const char* kind_name(AccessKind kind) {
  switch (kind) {
    case AccessKind::kWrite: return "remote write";
    case AccessKind::kRead: return "remote read";
    case AccessKind::kAtomic: return "remote atomic";
  }
  return "?";
}

std::string access_names(uint32_t access) {
  std::string s;
  auto add = [&](uint32_t bit, const char* name) {
    if (access & bit) s += (s.empty() ? "" : "|") + std::string(name);
  };
  add(kAccessRemoteRead, "read");
  add(kAccessRemoteWrite, "write");
  add(kAccessRemoteAtomic, "atomic");
  return s.empty() ? "local only" : s;
}

}  // namespace

std::string format_key(uint64_t key) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(key));
  return buf;
}

MemoryRegistry::MemoryRegistry() {
  // Keys are capabilities: a peer that was never given one should not guess it. The OS seed
  // makes them differ between runs; splitmix64 makes consecutive keys unrelated.
  std::random_device rd;
  key_state_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

uint64_t MemoryRegistry::fresh_key_locked() {
  for (;;) {
    uint64_t key = splitmix64(&key_state_);
    if (key != 0 && !regions_.count(key) && !removing_.count(key)) return key;
  }
}

RegionRef MemoryRegistry::add(void* addr, size_t length, uint32_t access) {
  if (addr == nullptr && length > 0)
    throw invalid_usage("register_memory: null address with length " + std::to_string(length),
                        {.op = "register_memory", .bytes = static_cast<int64_t>(length)});
  if ((access & ~static_cast<uint32_t>(kAccessAll)) != 0)
    throw invalid_usage("register_memory: unknown access flags " + std::to_string(access),
                        {.op = "register_memory"});
  std::lock_guard listeners_lock(listeners_mu_);
  RegionRef region;
  {
    std::lock_guard lock(mu_);
    region = std::make_shared<RegisteredMemory>(static_cast<char*>(addr), length, access,
                                                fresh_key_locked());
    regions_.emplace(region->key(), region);
  }
  for (RegistryListener* l : listeners_) l->on_add(region);
  return region;
}

void MemoryRegistry::remove(uint64_t key) {
  std::lock_guard listeners_lock(listeners_mu_);
  RegionRef region;
  {
    std::lock_guard lock(mu_);
    if (auto it = regions_.find(key); it != regions_.end()) {
      region = std::move(it->second);
      regions_.erase(it);
      removing_.emplace(key, region);
    } else if (auto again = removing_.find(key); again != removing_.end()) {
      region = again->second;
    } else {
      return;
    }
  }
  // New local accesses can no longer find the key; this waits out the one in flight, if any.
  {
    std::unique_lock lock(region->mu_);
    region->registered_ = false;
  }
  std::string still_used;
  for (RegistryListener* l : listeners_) {
    std::string why = l->on_remove(region);
    if (still_used.empty()) still_used = std::move(why);
  }
  if (!still_used.empty())
    throw timeout_error("deregistering key " + format_key(key) + ": " + still_used +
                            "; the memory must stay allocated until deregistration succeeds",
                        {.op = "deregister", .bytes = static_cast<int64_t>(region->length())});
  std::lock_guard lock(mu_);
  removing_.erase(key);
}

RegionRef MemoryRegistry::check(uint64_t key, uint64_t offset, uint64_t length, AccessKind kind,
                                std::string* reason) const {
  RegionRef region;
  {
    std::lock_guard lock(mu_);
    auto it = regions_.find(key);
    if (it != regions_.end()) region = it->second;
  }
  if (!region) {
    *reason = unregistered_denial(key);
    return nullptr;
  }
  *reason = access_denial(key, reinterpret_cast<uintptr_t>(region->base()), region->length(),
                          region->access(), offset, length, kind);
  return reason->empty() ? region : nullptr;
}

std::string unregistered_denial(uint64_t key) {
  return "key " + format_key(key) + " is not registered (never registered, or deregistered)";
}

std::string access_denial(uint64_t key, uint64_t base, uint64_t region_length, uint32_t access,
                          uint64_t offset, uint64_t length, AccessKind kind) {
  // Formatted only for a refusal: this check is on every one-sided operation's path (a
  // key formatted up front was ~10 % of a small write over UCX's shared memory).
  auto k = [key] { return "key " + format_key(key); };
  if ((access & needed_flag(kind)) == 0)
    return k() + " does not allow " + kind_name(kind) + " (region access: " +
           access_names(access) + ")";
  // Written so that offset + length cannot overflow.
  if (offset > region_length || length > region_length - offset)
    return k() + " offset " + std::to_string(offset) + " + " + std::to_string(length) +
           " bytes exceeds region of " + std::to_string(region_length) + " bytes";
  if (kind == AccessKind::kAtomic && (base + offset) % sizeof(uint64_t) != 0)
    return k() + " offset " + std::to_string(offset) +
           " is not 8-byte aligned, as a 64-bit atomic needs";
  return {};
}

size_t MemoryRegistry::size() const {
  std::lock_guard lock(mu_);
  return regions_.size();
}

void MemoryRegistry::add_listener(RegistryListener* listener) {
  std::lock_guard listeners_lock(listeners_mu_);
  std::vector<RegionRef> existing;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, region] : regions_) existing.push_back(region);
  }
  for (const RegionRef& region : existing) listener->on_add(region);
  listeners_.push_back(listener);
}

void MemoryRegistry::remove_listener(RegistryListener* listener) {
  std::lock_guard listeners_lock(listeners_mu_);
  std::erase(listeners_, listener);
}

void RegistryMemoryRegion::deregister() {
  if (deregistered_) return;
  registry_->remove(region_->key());
  deregistered_ = true;
}

RegistryMemoryRegion::~RegistryMemoryRegion() {
  // The caller frees the memory next: wait for as long as a peer may still access it.
  for (;;) {
    try {
      deregister();
      return;
    } catch (const Error& e) {
      log(LogLevel::kError, e.what(), "; waiting on");
    }
  }
}

}  // namespace plait::transport
