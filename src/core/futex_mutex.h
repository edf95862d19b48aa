// A mutex in one futex word, for the locks every call and every transport operation takes
// (a communicator's issue order, its engine's drive lock, free lists, completion queues, op
// tables, TCP streams). Uncontended, lock and unlock are one atomic instruction each, where
// glibc's pthread mutex runs tens (type and robustness checks), and a small allreduce takes
// several pairs (docs/measurements.md).
//
// The algorithm is the third mutex of Drepper's "Futexes Are Tricky": 0 free, 1 locked, 2
// locked and maybe waited for; unlock wakes one sleeper only when the word was 2. It never
// spins (nor does a default pthread mutex) and is not recursive. Satisfies Lockable, so
// std::lock_guard and std::unique_lock (try_to_lock, defer_lock) work with it.
#pragma once

#include <atomic>
#include <cstdint>

namespace plait {

class FutexMutex {
 public:
  FutexMutex() = default;
  FutexMutex(const FutexMutex&) = delete;
  FutexMutex& operator=(const FutexMutex&) = delete;

  void lock() {
    uint32_t seen = 0;
    if (!word_.compare_exchange_strong(seen, 1, std::memory_order_acquire, std::memory_order_relaxed))
      lock_contended(seen);
  }
  bool try_lock() {
    uint32_t seen = 0;
    return word_.compare_exchange_strong(seen, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() {
    if (word_.exchange(0, std::memory_order_release) == 2) wake_one();
  }

 private:
  void lock_contended(uint32_t seen);
  void wake_one();

  std::atomic<uint32_t> word_{0};
};

}  // namespace plait
