#include "transport/completion_queue.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <ctime>

#include "core/cpu_relax.h"
#include "core/futex.h"

namespace plait::transport {
namespace {

uint32_t* futex_word(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }

// Sleeps while *mine == mine_seen (a private word) and *shared == shared_seen (a word in a
// shared mapping), at most `ns`. futex_waitv (Linux 5.16) waits on both in one call; where
// it is missing the sleep is cut into 1 ms naps that look at the shared word in between,
// which bounds how late a wake-up through it can be.
void futex_wait_either(std::atomic<uint32_t>* mine, uint32_t mine_seen,
                       std::atomic<uint32_t>* shared, uint32_t shared_seen,
                       std::chrono::nanoseconds ns) {
#ifdef SYS_futex_waitv
  static std::atomic<bool> unsupported{false};
  if (!unsupported.load(std::memory_order_relaxed)) {
    futex_waitv waiters[2] = {};
    waiters[0].val = mine_seen;
    waiters[0].uaddr = reinterpret_cast<uintptr_t>(futex_word(mine));
    waiters[0].flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
    waiters[1].val = shared_seen;
    waiters[1].uaddr = reinterpret_cast<uintptr_t>(futex_word(shared));
    waiters[1].flags = FUTEX_32;
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    const int64_t end = now.tv_sec * 1000000000LL + now.tv_nsec + ns.count();
    timespec until{static_cast<time_t>(end / 1000000000), static_cast<long>(end % 1000000000)};
    if (::syscall(SYS_futex_waitv, waiters, 2, 0, &until, CLOCK_MONOTONIC) >= 0 || errno != ENOSYS)
      return;
    unsupported.store(true, std::memory_order_relaxed);
  }
#endif
  if (shared->load(std::memory_order_acquire) != shared_seen) return;
  futex_wait(mine, mine_seen, std::min<std::chrono::nanoseconds>(ns, std::chrono::milliseconds(1)));
}


// Brackets a spin: the queue counts an active poller (see begin_active_polling).
class PollingScope {
 public:
  explicit PollingScope(CompletionQueue* q) : q_(q) { q_->begin_active_polling(); }
  ~PollingScope() { q_->end_active_polling(); }
  PollingScope(const PollingScope&) = delete;
  PollingScope& operator=(const PollingScope&) = delete;

 private:
  CompletionQueue* q_;
};

}  // namespace

std::chrono::microseconds next_spin_budget(std::chrono::microseconds budget,
                                           std::chrono::nanoseconds slept, bool completed,
                                           std::chrono::microseconds base) {
  if (completed && slept < budget) return std::min(budget * 2, base * 16);
  if (slept > budget * 4) return std::max(budget / 2, base);
  return budget;
}

PolicyCompletionQueue::PolicyCompletionQueue(WaitPolicy policy, std::chrono::microseconds spin_time,
                                             InlineProgress* inline_progress)
    : policy_(policy),
      spin_time_(spin_time),
      inline_(inline_progress),
      spin_budget_us_(spin_time.count()) {
  policy_queue_ = this;
}

// Both wake under the lock: a consumer may take the completion (or see the interrupt) and
// destroy the queue right away, so nothing may touch the queue after the lock is released.
void PolicyCompletionQueue::push(Completion&& completion) {
  std::lock_guard lock(mu_);
  items_.push_back(std::move(completion));
  // Plain stores, not atomic adds (locked instructions on every completion): count_ changes
  // only under mu_, and activity_ only has to move.
  count_.store(items_.size(), std::memory_order_release);
  bump_activity();
  // An active poller takes it; waking a sleeper would only cost a syscall and a context
  // switch on a core that the poller's peers need. end_active_polling() covers the handover.
  if (active_pollers_.load(std::memory_order_seq_cst) == 0) wake(false);
}

void PolicyCompletionQueue::begin_active_polling() {
  active_pollers_.fetch_add(1, std::memory_order_seq_cst);
  if (inline_) inline_->begin_polling();
}

void PolicyCompletionQueue::end_active_polling() {
  if (inline_) inline_->end_polling();
  std::lock_guard lock(mu_);
  // Under the lock, so a push either saw the poller (and its item is counted here) or woke.
  if (active_pollers_.fetch_sub(1, std::memory_order_seq_cst) == 1 && !items_.empty())
    wake(false);
}

void PolicyCompletionQueue::hand_off_progress() {
  if (inline_) inline_->hand_off();
}

bool PolicyCompletionQueue::wait_ready(std::chrono::microseconds timeout) {
  return wait_ready_or(nullptr, 0, timeout);
}

// `shared_word` may be null: then only completions and interrupts end the wait.
bool PolicyCompletionQueue::wait_ready_or(std::atomic<uint32_t>* shared_word, uint32_t seen,
                                          std::chrono::microseconds timeout) {
  const auto until = Clock::now() + timeout;
  auto rung = [&] {
    return shared_word != nullptr && shared_word->load(std::memory_order_acquire) != seen;
  };
  for (;;) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    uint32_t mine = sequence_.load(std::memory_order_seq_cst);
    bool ready = count_.load(std::memory_order_acquire) > 0;
    bool interrupted = !ready && take_interrupt();
    bool was_rung = rung();
    auto now = Clock::now();
    if (!ready && !interrupted && !was_rung && now < until) {
      if (shared_word != nullptr)
        futex_wait_either(&sequence_, mine, shared_word, seen, until - now);
      else
        futex_wait(&sequence_, mine, until - now);
    }
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    if (ready) return true;
    if (interrupted || was_rung || now >= until || rung())
      return count_.load(std::memory_order_acquire) > 0;
  }
}

void PolicyCompletionQueue::interrupt() {
  std::lock_guard lock(mu_);
  interrupted_.store(true, std::memory_order_release);
  wake(true);
}

void PolicyCompletionQueue::wake(bool all) {
  // seq_cst pairs with the sleeper's "sleepers_++ then read sequence_": either the sleeper
  // sees the new sequence value, or we see it registered and wake it.
  sequence_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake(&sequence_, all ? INT_MAX : 1);
}

bool PolicyCompletionQueue::poll(Completion* out) {
  if (take_queued(out)) return true;
  if (!inline_ || !inline_->progress()) return false;
  bump_activity();
  return take_queued(out);
}

bool PolicyCompletionQueue::take_queued(Completion* out) {
  if (count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(mu_);
  if (items_.empty()) return false;
  *out = std::move(items_.front());
  items_.pop_front();
  count_.store(items_.size(), std::memory_order_release);
  return true;
}

bool PolicyCompletionQueue::wait(Completion* out, std::chrono::microseconds timeout) {
  if (poll(out)) return true;
  if (take_interrupt()) return false;
  // A few probes before the clock is read: a ping-pong's answer often comes within them, and
  // the two or three clock reads of the deadlines were ~5 % of an 8 B round trip over UCX sm.
  if (policy_ != WaitPolicy::kBlock && timeout.count() > 0) {
    PollingScope polling(this);
    for (int i = 0; i < 32; ++i) {
      cpu_relax();
      if (poll(out)) return true;
      if (interrupted_.load(std::memory_order_relaxed) && take_interrupt()) return false;
    }
  }
  const auto until = Clock::now() + timeout;
  switch (policy_) {
    case WaitPolicy::kSpin:
      return spin_until(out, until);
    case WaitPolicy::kHybrid: {
      // The budget is for a quiet wait: while polling moves work (a large message coming in
      // without a completion yet), it starts over.
      bool interrupted = false;
      const std::chrono::microseconds budget(spin_budget_us_.load(std::memory_order_relaxed));
      for (;;) {
        const uint64_t seen = activity();
        if (spin_until(out, std::min(until, Clock::now() + budget), &interrupted)) return true;
        if (interrupted || activity() == seen || Clock::now() >= until) break;
      }
      // The spin consumed an interrupt: blocking now would sleep through it.
      if (interrupted || Clock::now() >= until) return false;
      hand_off_progress();  // nobody polls the provider while we sleep
      const auto asleep = Clock::now();
      const bool completed = block_until(out, until);
      spin_budget_us_.store(
          next_spin_budget(budget, Clock::now() - asleep, completed, spin_time_).count(),
          std::memory_order_relaxed);
      return completed;
    }
    case WaitPolicy::kBlock:
      break;
  }
  return block_until(out, until);
}

bool PolicyCompletionQueue::spin_until(Completion* out, Clock::time_point until,
                                       bool* interrupted) {
  // Reading the clock costs ~20 ns; check it every few dozen probes, not every one. The
  // yield lets the thread that will produce our completion (a progress thread, a peer rank)
  // run when it shares our core: on an oversubscribed host a pure spin would hold it off for
  // the whole spin budget. Not before 64 probes (a few microseconds): a yield is a system
  // call, and one at the start of every wait was ~40 % of a small-message ping-pong over UCX
  // shared memory (send_lat 8 B ~0.75 -> ~0.35 us).
  PollingScope polling(this);
  for (unsigned i = 1;; ++i) {
    if (poll(out)) return true;
    if (interrupted_.load(std::memory_order_relaxed) && take_interrupt()) {
      if (interrupted) *interrupted = true;
      return false;
    }
    if ((i & 31) == 0) {
      if (Clock::now() >= until) return false;
      if ((i & 63) == 0) sched_yield();
    }
    cpu_relax();
  }
}

bool PolicyCompletionQueue::block_until(Completion* out, Clock::time_point until) {
  for (;;) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    uint32_t seen = sequence_.load(std::memory_order_seq_cst);
    bool ready = poll(out);
    bool interrupted = !ready && take_interrupt();
    auto now = Clock::now();
    if (!ready && !interrupted && now < until) futex_wait(&sequence_, seen, until - now);
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    if (ready) return true;
    if (interrupted || now >= until) return false;
  }
}

}  // namespace plait::transport
