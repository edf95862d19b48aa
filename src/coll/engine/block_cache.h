// Recycled memory for the objects every call allocates once (its Work): a loop of calls on
// one communicator hands the last block back and takes it again, so that the steady state
// of a loop allocates nothing.
//
// BlockCache keeps a few blocks of one size; CachingAllocator is the allocator
// std::allocate_shared takes, so the shared object's control block and the object come
// from the cache in one block. There is one cache per process, never destroyed: the
// allocator carries no state (copying it inside allocate_shared costs no reference count,
// which would be two atomic operations per copy), and a Work that outlives its
// communicator, or the process's static destructors, still returns its block safely.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <new>

namespace plait::coll {

class BlockCache {
 public:
  BlockCache() = default;
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  ~BlockCache() {
    for (auto& slot : slots_)
      if (void* p = slot.exchange(nullptr)) ::operator delete(p);
  }

  void* take(size_t bytes) {
    if (bytes == kBlockBytes)
      for (auto& slot : slots_)
        if (void* p = slot.exchange(nullptr, std::memory_order_acquire)) return p;
    return ::operator new(std::max(bytes, kBlockBytes));
  }
  void give(void* p, size_t bytes) {
    if (bytes == kBlockBytes)
      for (auto& slot : slots_) {
        void* empty = nullptr;
        if (slot.compare_exchange_strong(empty, p, std::memory_order_release)) return;
      }
    ::operator delete(p);
  }

  // Blocks of any other size are not cached (they come and go through operator new).
  static constexpr size_t kBlockBytes = 512;

 private:
  std::atomic<void*> slots_[8] = {};
};

// The process's cache: leaked on purpose (see the top of this file).
inline BlockCache& process_block_cache() {
  static BlockCache* cache = new BlockCache;
  return *cache;
}

template <typename T>
struct CachingAllocator {
  using value_type = T;

  CachingAllocator() = default;
  template <typename U>
  CachingAllocator(const CachingAllocator<U>&) {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    return static_cast<T*>(process_block_cache().take(
        bytes <= BlockCache::kBlockBytes ? BlockCache::kBlockBytes : bytes));
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    process_block_cache().give(p, bytes <= BlockCache::kBlockBytes ? BlockCache::kBlockBytes : bytes);
  }
  template <typename U>
  bool operator==(const CachingAllocator<U>&) const { return true; }
};

}  // namespace plait::coll
