// Memory resources for the per-message structures (ops, matcher and op-table nodes): a freed
// block goes on a free list and the next allocation takes it back, so that a warm path
// neither calls the global allocator nor pays the size-class search of the std::pmr pools
// (their size-class search per allocation and, for the synchronized one, a rwlock and a
// thread-specific lookup; docs/measurements.md).
//
// Every request of at most `block_bytes` gets a whole block; larger ones (a map's bucket
// array) go to the upstream resource. The free list keeps the most blocks that were ever in
// use at once and returns them when the resource is destroyed, which must be after the last
// block was freed.
#pragma once

#include <cstddef>
#include <memory_resource>
#include <mutex>

#include "core/futex_mutex.h"

namespace plait::transport {

// Not thread-safe: its owner guards it (as TagMatcher and OpTable do with their lock).
class FreeListResource final : public std::pmr::memory_resource {
 public:
  explicit FreeListResource(size_t block_bytes,
                            std::pmr::memory_resource* upstream = std::pmr::new_delete_resource())
      : block_bytes_(block_bytes < sizeof(Node) ? sizeof(Node) : block_bytes),
        upstream_(upstream) {}
  ~FreeListResource() override {
    while (free_) {
      Node* n = free_;
      free_ = n->next;
      upstream_->deallocate(n, block_bytes_, kAlign);
    }
  }
  FreeListResource(const FreeListResource&) = delete;
  FreeListResource& operator=(const FreeListResource&) = delete;

 private:
  struct Node {
    Node* next;
  };
  static constexpr size_t kAlign = alignof(std::max_align_t);

  bool pooled(size_t bytes, size_t align) const { return bytes <= block_bytes_ && align <= kAlign; }

  void* do_allocate(size_t bytes, size_t align) override {
    if (!pooled(bytes, align)) return upstream_->allocate(bytes, align);
    if (!free_) return upstream_->allocate(block_bytes_, kAlign);
    Node* n = free_;
    free_ = n->next;
    return n;
  }
  void do_deallocate(void* p, size_t bytes, size_t align) override {
    if (!pooled(bytes, align)) {
      upstream_->deallocate(p, bytes, align);
      return;
    }
    free_ = new (p) Node{free_};
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  const size_t block_bytes_;
  std::pmr::memory_resource* const upstream_;
  Node* free_ = nullptr;
};

// The same, for blocks allocated and freed on any thread (an op is freed wherever its last
// reference drops: the caller, the progress thread, a frame written by another caller).
class SynchronizedFreeListResource final : public std::pmr::memory_resource {
 public:
  explicit SynchronizedFreeListResource(size_t block_bytes) : blocks_(block_bytes) {}

 private:
  void* do_allocate(size_t bytes, size_t align) override {
    std::lock_guard lock(mu_);
    return blocks_.allocate(bytes, align);
  }
  void do_deallocate(void* p, size_t bytes, size_t align) override {
    std::lock_guard lock(mu_);
    blocks_.deallocate(p, bytes, align);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  FutexMutex mu_;
  FreeListResource blocks_;  // guarded by mu_
};

}  // namespace plait::transport
