// The completion queue every provider hands out: a locked FIFO of completions plus a wait
// that follows the fabric's wait policy.
//
//   spin    poll until the timeout; lowest latency, burns a core (bad on oversubscribed hosts)
//   block   sleep on a futex until a completion arrives; costs a wake-up
//   hybrid  spin for `spin_time`, then sleep: a fast reply is caught spinning, a slow one
//           does not burn the core
//
// Thread safety: push() may be called from any thread (progress threads, a caller's fast
// path); poll()/wait()/interrupt() from any thread. Completions come out in push order.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "core/futex_mutex.h"
#include "core/clock.h"
#include "core/config.h"
#include "transport/fabric.h"
#include "transport/ring_queue.h"

namespace plait::transport {

// A provider that can be progressed by a waiting thread (DESIGN.md: progress runs on a
// progress thread "or inline in wait()"). While a thread spins on a queue it brackets the
// spin with begin_polling()/end_polling() and calls progress() between probes; a provider
// may then skip waking its own progress thread (the poller does the work in its stead).
// end_polling() must leave nothing stranded: what arrived after the last progress() is
// handed to the provider's own thread.
class InlineProgress {
 public:
  virtual ~InlineProgress() = default;
  virtual void begin_polling() = 0;
  virtual void end_polling() = 0;
  // One pass over the provider's incoming work; true if it did anything.
  virtual bool progress() = 0;
  // A thread that polled is about to sleep until a completion wakes it: a provider whose own
  // thread steps aside while callers poll must take its work back now, not after its next
  // check. Costs a wake-up, so it is called only on the way to sleep.
  virtual void hand_off() {}
};

// Hybrid's spin budget for the next wait, after one that spun `budget`, then slept `slept`
// and ended with a completion (`completed`) or without one. A completion that came within
// another budget's time after the sleep began would have been caught by spinning twice as
// long, without the wake-ups a sleep costs (the provider's thread takes the worker back, the
// waiter is woken): the budget doubles, up to 16x `base`. A sleep four budgets long halves it,
// down to `base`. On UCX's tcp a fixed budget let a ping-pong's waits sleep now and then, and
// each such sleep's context switches delayed the next message (docs/measurements.md).
std::chrono::microseconds next_spin_budget(std::chrono::microseconds budget,
                                           std::chrono::nanoseconds slept, bool completed,
                                           std::chrono::microseconds base);

class PolicyCompletionQueue final : public CompletionQueue {
 public:
  // `inline_progress` (may be null) is driven by poll() and by the spin phase of wait(); it
  // must outlive the queue's last poll/wait.
  PolicyCompletionQueue(WaitPolicy policy, std::chrono::microseconds spin_time,
                        InlineProgress* inline_progress = nullptr);

  void push(Completion&& completion);

  // Takes a queued completion; if there is none, runs one inline progress pass and looks again.
  bool poll(Completion* out) override;
  // Returns a queued completion first; otherwise a pending interrupt() makes it return false
  // at once. The interrupt is sticky: one that arrives while nobody waits is consumed by the
  // next wait(), so an interrupt racing with the start of a wait is never lost.
  bool wait(Completion* out, std::chrono::microseconds timeout) override;
  void interrupt() override;
  bool wait_ready(std::chrono::microseconds timeout) override;
  bool wait_ready_or(std::atomic<uint32_t>* shared_word, uint32_t seen,
                     std::chrono::microseconds timeout) override;
  void begin_active_polling() override;
  void end_active_polling() override;
  void hand_off_progress() override;
  uint64_t activity() const override { return activity_.load(std::memory_order_relaxed); }

  size_t size() const { return count_.load(std::memory_order_acquire); }

 private:
  // Returns false at the deadline or on an interrupt (then *interrupted is set).
  bool spin_until(Completion* out, Clock::time_point until, bool* interrupted = nullptr);
  bool block_until(Completion* out, Clock::time_point until);
  bool take_queued(Completion* out);
  bool take_interrupt() { return interrupted_.exchange(false, std::memory_order_acq_rel); }
  void wake(bool all);  // with mu_ held
  // Racing bumps may count once: readers only ask whether it moved.
  void bump_activity() {
    activity_.store(activity_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  const WaitPolicy policy_;
  const std::chrono::microseconds spin_time_;
  InlineProgress* const inline_;
  // Hybrid's current budget (next_spin_budget), in microseconds; waiters race benignly.
  std::atomic<int64_t> spin_budget_us_;

  FutexMutex mu_;
  RingQueue<Completion> items_;
  // Lets spinners and poll() see "empty" without taking the lock.
  std::atomic<size_t> count_{0};
  std::atomic<bool> interrupted_{false};
  // The futex word: bumped by every push and interrupt, so a sleeper that read an old value
  // does not sleep through the event (it is re-checked by the kernel).
  std::atomic<uint32_t> sequence_{0};
  std::atomic<uint32_t> sleepers_{0};
  std::atomic<uint32_t> active_pollers_{0};
  std::atomic<uint64_t> activity_{0};
};

}  // namespace plait::transport
