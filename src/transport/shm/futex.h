// Futex wait/wake on a word in memory shared between processes. These are the non-private
// operations (no FUTEX_PRIVATE_FLAG): the kernel keys the word by its backing page, so a
// sleeper in one process is woken by a waker in another that maps the same segment at a
// different address.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

#include "core/cpu_relax.h"

namespace plait::transport::shm {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "a futex needs a plain, lock-free 32-bit word");

// Sleeps while *word == expected, at most `timeout`. Spurious returns are allowed: callers
// re-check their condition.
inline void futex_wait_shared(std::atomic<uint32_t>* word, uint32_t expected,
                              std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts{static_cast<time_t>(timeout.count() / 1000000000),
              static_cast<long>(timeout.count() % 1000000000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void futex_wake_shared(std::atomic<uint32_t>* word, int count = INT_MAX) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}


}  // namespace plait::transport::shm
