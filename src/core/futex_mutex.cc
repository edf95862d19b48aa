#include "core/futex_mutex.h"

#include "core/futex.h"

namespace plait {

void FutexMutex::lock_contended(uint32_t seen) {
  // Mark the word "maybe waited for" before sleeping, so the holder's unlock wakes us; a
  // lock taken this way keeps the mark (its unlock may wake nobody: harmless).
  if (seen != 2) seen = word_.exchange(2, std::memory_order_acquire);
  while (seen != 0) {
    futex_wait(&word_, 2);
    seen = word_.exchange(2, std::memory_order_acquire);
  }
}

void FutexMutex::wake_one() { futex_wake(&word_, 1); }

}  // namespace plait
