// The table of memory registered for remote access, shared by every provider: key
// generation, the access check every one-sided operation goes through on the target, and
// deregistration that is safe while remote operations are in flight.
//
// Deregistration contract: once MemoryRegistry::remove() returns, no provider thread touches
// the region's memory any more. Providers get there by pinning the region around every single
// access (one memcpy, one recv/send syscall, one atomic): a pin is a shared lock plus a
// "still registered" check, and remove() takes the lock exclusively after unpublishing the
// key. So remove() waits at most for one in-flight syscall, never for a whole transfer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/futex_shared_mutex.h"
#include "transport/fabric.h"

namespace plait::transport {

class RegisteredMemory {
 public:
  RegisteredMemory(char* base, size_t length, uint32_t access, uint64_t key)
      : base_(base), length_(length), access_(access), key_(key) {}

  char* base() const { return base_; }
  size_t length() const { return length_; }
  uint32_t access() const { return access_; }
  uint64_t key() const { return key_; }

  // Holds off deregistration while it lives; false when the region is already gone (then
  // the memory must not be touched).
  class Pin {
   public:
    Pin() = default;
    explicit Pin(RegisteredMemory& r) : lock_(r.mu_), valid_(r.registered_) {}
    explicit operator bool() const { return valid_; }

   private:
    std::shared_lock<FutexSharedMutex> lock_;
    bool valid_ = false;
  };
  Pin pin() { return Pin(*this); }

 private:
  friend class MemoryRegistry;
  char* const base_;
  const size_t length_;
  const uint32_t access_;
  const uint64_t key_;
  FutexSharedMutex mu_;
  bool registered_ = true;  // guarded by mu_
};

using RegionRef = std::shared_ptr<RegisteredMemory>;

// What an access needs, beyond bounds.
enum class AccessKind { kWrite, kRead, kAtomic };

// Why an access of `length` bytes at `offset` into a region {base, region_length, access}
// with `key` is refused, or empty when it is allowed: the bounds, access-flag and alignment
// rules of MemoryRegistry::check() for a region already found. Lets a provider whose
// initiator checks a published copy of the region (shm) give the target's exact words.
std::string access_denial(uint64_t key, uint64_t base, uint64_t region_length, uint32_t access,
                          uint64_t offset, uint64_t length, AccessKind kind);
// The reason for a key that is not (or no longer) registered.
std::string unregistered_denial(uint64_t key);

// Told about every region of a registry, for a provider that publishes regions elsewhere
// (the shm provider: a table in shared memory that peers check and pin without the owner's
// CPU). Calls are serialized; on_remove() runs inside MemoryRegistry::remove() after the key
// is unpublished locally. It returns an empty string once the listener's own path no longer
// touches the region's memory, or, after a bounded wait, why it still may (who accesses it);
// it is then called again for the same region at the next remove(). Neither may throw.
class RegistryListener {
 public:
  virtual ~RegistryListener() = default;
  virtual void on_add(const RegionRef& region) = 0;
  virtual std::string on_remove(const RegionRef& region) = 0;
};

class MemoryRegistry {
 public:
  MemoryRegistry();

  // Throws plait::Error(kInvalidUsage) for a null address with a nonzero length or unknown
  // access bits.
  RegionRef add(void* addr, size_t length, uint32_t access);
  // Unpublishes the key, then waits for the accesses in flight to finish. Throws
  // Error(kTimeout) when a listener reports a peer that still accesses the region after its
  // bound: the key stays unpublished and reserved, the caller must keep the memory, and a
  // later remove() of the key waits again. Unknown keys are ignored.
  void remove(uint64_t key);

  // The target's check, done before any byte is touched. On success returns the region;
  // otherwise returns null and sets *reason to e.g.
  //   "key 0x1f2e... offset 4096 + 64 bytes exceeds region of 4096 bytes".
  RegionRef check(uint64_t key, uint64_t offset, uint64_t length, AccessKind kind,
                  std::string* reason) const;

  size_t size() const;

  // Registers a listener and announces every region registered so far to it (on_add).
  // The listener must be removed before it is destroyed.
  void add_listener(RegistryListener* listener);
  void remove_listener(RegistryListener* listener);

 private:
  uint64_t fresh_key_locked();

  // Taken before mu_ by add/remove/add_listener, and held while listeners are called, so a
  // listener sees each region added once and removed once, in order. Not held by check().
  std::mutex listeners_mu_;
  std::vector<RegistryListener*> listeners_;  // guarded by listeners_mu_
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, RegionRef> regions_;
  // Unpublished, but a listener's peer may still access them (remove() threw).
  std::unordered_map<uint64_t, RegionRef> removing_;
  uint64_t key_state_;  // splitmix64 state, seeded from the OS
};

// The MemoryRegion handed to users: deregisters itself on destruction. Keeps the registry
// alive, so a region may outlive its fabric.
class RegistryMemoryRegion final : public MemoryRegion {
 public:
  RegistryMemoryRegion(std::shared_ptr<MemoryRegistry> registry, RegionRef region)
      : registry_(std::move(registry)), region_(std::move(region)) {}
  ~RegistryMemoryRegion() override;
  void deregister() override;

  void* addr() const override { return region_->base(); }
  size_t length() const override { return region_->length(); }
  uint32_t access() const override { return region_->access(); }
  RemoteKey remote_key() const override {
    return {reinterpret_cast<uint64_t>(region_->base()), region_->length(), region_->key()};
  }

 private:
  std::shared_ptr<MemoryRegistry> registry_;
  RegionRef region_;
  bool deregistered_ = false;
};

// "0x00000000deadbeef": how keys appear in messages.
std::string format_key(uint64_t key);

}  // namespace plait::transport
