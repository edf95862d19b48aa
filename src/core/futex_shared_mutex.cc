#include "core/futex_shared_mutex.h"

#include <climits>

#include "core/futex.h"

namespace plait {

void FutexSharedMutex::lock_shared_contended() {
  for (;;) {
    uint32_t seen = word_.load(std::memory_order_relaxed);
    if ((seen & kWriter) != 0) {
      futex_wait(&word_, seen);  // until the writer's unlock changes the word
      continue;
    }
    if (word_.compare_exchange_weak(seen, seen + 1, std::memory_order_acquire,
                                    std::memory_order_relaxed))
      return;
  }
}

void FutexSharedMutex::lock() {
  writers_.lock();
  uint32_t seen = word_.fetch_or(kWriter, std::memory_order_acquire) | kWriter;
  while (seen != kWriter) {
    futex_wait(&word_, seen);  // a reader leaving changes the word; the last one wakes us
    seen = word_.load(std::memory_order_acquire);
  }
}

bool FutexSharedMutex::try_lock() {
  if (!writers_.try_lock()) return false;
  uint32_t expected = 0;
  if (word_.compare_exchange_strong(expected, kWriter, std::memory_order_acquire,
                                    std::memory_order_relaxed))
    return true;
  writers_.unlock();
  return false;
}

void FutexSharedMutex::unlock() {
  word_.fetch_and(~kWriter, std::memory_order_release);
  wake_all();  // readers that slept on the writer bit
  writers_.unlock();
}

void FutexSharedMutex::wake_all() { futex_wake(&word_, INT_MAX); }

}  // namespace plait
