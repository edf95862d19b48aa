// A reader-writer lock in one futex word, for guards that every transport operation takes
// shared and only a rare cancel() or teardown takes exclusively (the providers' user-memory
// and report guards). Uncontended, lock_shared and unlock_shared are one atomic instruction
// each, where std::shared_mutex (a pthread rwlock) runs many more, two pairs on every small
// TCP message (docs/measurements.md).
//
// The word holds the reader count and a writer bit. A writer sets the bit, which turns new
// readers away (they sleep until it clears: writers are not starved), then sleeps until the
// readers already inside leave; the last of them wakes it. Writers queue on a FutexMutex of
// their own. Never spins, not recursive; satisfies SharedLockable, so std::shared_lock and
// std::unique_lock work with it.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/futex_mutex.h"

namespace plait {

class FutexSharedMutex {
 public:
  FutexSharedMutex() = default;
  FutexSharedMutex(const FutexSharedMutex&) = delete;
  FutexSharedMutex& operator=(const FutexSharedMutex&) = delete;

  void lock_shared() {
    uint32_t seen = word_.load(std::memory_order_relaxed);
    if ((seen & kWriter) != 0 ||
        !word_.compare_exchange_strong(seen, seen + 1, std::memory_order_acquire,
                                       std::memory_order_relaxed))
      lock_shared_contended();
  }
  bool try_lock_shared() {
    uint32_t seen = word_.load(std::memory_order_relaxed);
    while ((seen & kWriter) == 0) {
      if (word_.compare_exchange_weak(seen, seen + 1, std::memory_order_acquire,
                                      std::memory_order_relaxed))
        return true;
    }
    return false;
  }
  void unlock_shared() {
    // The last reader out while a writer waits wakes it.
    if (word_.fetch_sub(1, std::memory_order_release) == (kWriter | 1)) wake_all();
  }

  void lock();
  bool try_lock();
  void unlock();

 private:
  static constexpr uint32_t kWriter = 1u << 31;

  void lock_shared_contended();
  void wake_all();

  std::atomic<uint32_t> word_{0};
  FutexMutex writers_;
};

}  // namespace plait
