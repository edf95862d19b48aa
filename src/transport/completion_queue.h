// The completion queue every provider hands out: a locked FIFO of completions plus a wait
// that follows the fabric's wait policy.
//
//   spin    poll until the timeout; lowest latency, burns a core (bad on oversubscribed hosts)
//   block   sleep on a futex until a completion arrives; costs a wake-up (~5-10 us)
//   hybrid  spin for `spin_time`, then sleep: a fast reply is caught spinning, a slow one
//           does not burn the core
//
// Thread safety: push() may be called from any thread (progress threads, a caller's fast
// path); poll()/wait()/interrupt() from any thread. Completions come out in push order.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>

#include "core/clock.h"
#include "core/config.h"
#include "transport/fabric.h"

namespace plait::transport {

class PolicyCompletionQueue final : public CompletionQueue {
 public:
  PolicyCompletionQueue(WaitPolicy policy, std::chrono::microseconds spin_time);

  void push(Completion completion);

  bool poll(Completion* out) override;
  // Returns a queued completion first; otherwise a pending interrupt() makes it return false
  // at once. The interrupt is sticky: one that arrives while nobody waits is consumed by the
  // next wait(), so an interrupt racing with the start of a wait is never lost.
  bool wait(Completion* out, std::chrono::microseconds timeout) override;
  void interrupt() override;

  size_t size() const { return count_.load(std::memory_order_acquire); }

 private:
  // Returns false at the deadline or on an interrupt (then *interrupted is set).
  bool spin_until(Completion* out, Clock::time_point until, bool* interrupted = nullptr);
  bool block_until(Completion* out, Clock::time_point until);
  bool take_interrupt() { return interrupted_.exchange(false, std::memory_order_acq_rel); }
  void wake(bool all);  // with mu_ held

  const WaitPolicy policy_;
  const std::chrono::microseconds spin_time_;

  std::mutex mu_;
  std::deque<Completion> items_;
  // Lets spinners and poll() see "empty" without taking the lock.
  std::atomic<size_t> count_{0};
  std::atomic<bool> interrupted_{false};
  // The futex word: bumped by every push and interrupt, so a sleeper that read an old value
  // does not sleep through the event (it is re-checked by the kernel).
  std::atomic<uint32_t> sequence_{0};
  std::atomic<uint32_t> sleepers_{0};
};

}  // namespace plait::transport
