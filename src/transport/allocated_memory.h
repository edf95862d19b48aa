// Memory a fabric allocates for remote access (Fabric::allocate_memory): a registered region
// that owns its memory and lets it go only after deregistration has succeeded, so a peer that
// is slow to let go of the key never writes into memory returned to the system.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "transport/fabric.h"

namespace plait::transport {

class OwningMemoryRegion final : public MemoryRegion {
 public:
  // `release` frees the memory of `registration`; it runs once, after the registration is
  // gone (its destructor waits for as long as a peer may access the memory).
  OwningMemoryRegion(std::unique_ptr<MemoryRegion> registration, std::function<void()> release)
      : registration_(std::move(registration)), release_(std::move(release)) {}
  ~OwningMemoryRegion() override {
    registration_.reset();
    release_();
  }
  OwningMemoryRegion(const OwningMemoryRegion&) = delete;
  OwningMemoryRegion& operator=(const OwningMemoryRegion&) = delete;

  // The memory stays readable and writable locally until destruction.
  void deregister() override { registration_->deregister(); }
  void* addr() const override { return registration_->addr(); }
  size_t length() const override { return registration_->length(); }
  uint32_t access() const override { return registration_->access(); }
  RemoteKey remote_key() const override { return registration_->remote_key(); }

 private:
  std::unique_ptr<MemoryRegion> registration_;
  std::function<void()> release_;
};

// Fabric::allocate_memory for a provider without memory of its own: zeroed, page-aligned
// anonymous memory registered on `fabric`. Throws kInvalidUsage for length 0, kSystem when
// the system has no memory to give.
std::unique_ptr<MemoryRegion> allocate_anonymous_memory(Fabric& fabric, size_t length,
                                                        uint32_t access);

}  // namespace plait::transport
