// Who runs a communicator's engine: the thread that submits a call starts it when nobody
// drives; a thread that waits drives the engine itself for its spin budget (PLAIT_WAIT); the
// engine thread takes over, asleep on its completion queue and its segment doorbell, when
// nobody does (the segment's pollers / sleeping protocol, collective_segment.h).
#include <sched.h>

#include "coll/comm_engine.h"
#include "coll/engine_internal.h"
#include "core/cpu_relax.h"

namespace plait::coll {

using namespace engine;

// The caller starts its operation itself when nobody is driving: its first messages leave
// now, and the completions they cause wake the engine thread if nobody waits. Otherwise the
// current driver (or the woken engine thread) takes the submission on its next pass.
void CommEngine::start_or_hand_over() {
  std::unique_lock drive(drive_mu_, std::try_to_lock);
  if (!drive.owns_lock()) {
    cq_->interrupt();
    return;
  }
  DriverMark mark(driver_);
  // As a poller: the completions this pass causes (an eager send's, say) are taken here,
  // not announced to the sleeping engine thread with a futex wake-up.
  begin_driving();
  run_available();
  end_driving();
}

void CommEngine::begin_driving() {
  cq_->begin_active_polling();
  if (!segment_) return;
  segment::RankControl& own = segment_->own();
  if (poll_credit_)
    poll_credit_ = false;  // counted already, by the submitter that lent it
  else
    own.pollers.fetch_add(1, std::memory_order_seq_cst);
  // Polling for real, not on a lent count: no grace runs out (else a caller whose call
  // started on the engine thread, with an old grace, would be rung on every flag).
  own.grace_until.store(segment::kPolling, std::memory_order_release);
}

void CommEngine::end_driving(bool lend) {
  cq_->end_active_polling();
  if (!segment_) return;
  segment::RankControl& own = segment_->own();
  if (lend && policy_ != WaitPolicy::kBlock && active_ && !active_->schedule && !active_done()) {
    // The caller waits next, and polls: peers need not ring us meanwhile.
    own.grace_until.store((Clock::now() + spin_time_).time_since_epoch().count(),
                          std::memory_order_release);
    poll_credit_ = true;
    return;
  }
  own.pollers.fetch_sub(1, std::memory_order_seq_cst);
  // A peer that published while we polled did not ring us; whatever it published after our
  // last pass is taken now, and from here on a peer rings the engine thread instead.
  if (active_ && !active_->schedule && !active_done()) run_available(false);
}

void CommEngine::loop() {
  while (!stop_) {
    Clock::time_point wake;
    // Before the last look: a peer that publishes after it sees us asleep and rings the bell
    // (collective_segment.h); the bell's value now tells a ring during the pass.
    uint32_t bell = 0;
    if (segment_) {
      segment_->own().sleeping.store(1, std::memory_order_seq_cst);
      bell = segment_->own().bell.load(std::memory_order_seq_cst);
    }
    {
      std::lock_guard drive(drive_mu_);
      DriverMark mark(driver_);
      // A submitter lent its poller count to the wait it is about to begin. Past its grace
      // it did not wait (an asynchronous call): this thread takes over. Before, it is on its
      // way: taking the count now would have peers ring us on every call, and every ring
      // wakes this thread to contend for the drive lock with the caller.
      auto credit_end = Clock::time_point::max();
      if (poll_credit_ && segment_) {
        const int64_t grace = segment_->own().grace_until.load(std::memory_order_acquire);
        if (Clock::now().time_since_epoch().count() >= grace) {
          poll_credit_ = false;
          segment_->own().pollers.fetch_sub(1, std::memory_order_seq_cst);
        } else {
          credit_end = Clock::time_point(Clock::duration(grace));
        }
      }
      wake = std::min(run_available(), credit_end);
    }
    // Sleep without the lock, so a waiting caller can drive; never spin here (the caller
    // does the spinning). Completions and interrupts (new calls, aborts, stop) wake us.
    sleep_until(std::min(wake, Clock::now() + kMaxSleep), bell);
    if (segment_) segment_->own().sleeping.store(0, std::memory_order_relaxed);
  }
}

void CommEngine::sleep_until(Clock::time_point wake, uint32_t bell_seen) {
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(wake - Clock::now());
  left = std::max(left, std::chrono::microseconds(0));
  if (segment_)
    cq_->wait_ready_or(&segment_->own().bell, bell_seen, left);
  else
    cq_->wait_ready(left);
}

void CommEngine::drive(const WorkImpl& work, Clock::time_point until) {
  if (policy_ == WaitPolicy::kBlock) return;  // the engine thread does it; we sleep
  // Hybrid spins until spin_time passes without activity on the queue, not spin_time in
  // all: a large message moves for hundreds of microseconds, and a driver that went to
  // sleep in the middle of it handed every later step to two thread wake-ups (tcp 1 MiB
  // allreduce np=2: ~650 us instead of ~320).
  auto spin_end =
      policy_ == WaitPolicy::kSpin ? until : std::min(until, Clock::now() + spin_time_);
  uint64_t activity = cq_->activity();
  // Never block on the lock: another waiter may hold it for its whole wait (under kSpin, up
  // to its own timeout). Its passes progress our operation too; we watch our Work and take
  // over when the lock is free, and leave at our spin budget like a driver would.
  std::unique_lock drive(drive_mu_, std::defer_lock);
  for (unsigned i = 1; !drive.try_lock(); ++i) {
    if (work.done()) return;
    if ((i & 63) == 0 && Clock::now() >= spin_end) {
      // The driver may finish its own work and leave ours to the provider's thread.
      cq_->hand_off_progress();
      return;
    }
    if (oversubscribed_ || (i & 1023) == 0)
      sched_yield();
    else
      cpu_relax();
  }
  DriverMark mark(driver_);
  begin_driving();
  // The yield lets a peer rank that shares our core run: on an oversubscribed host a pure
  // spin would hold off the very message we wait for.
  // Deadlines and the clock are looked at every 64 passes only (reading the clock costs
  // as much as a pass over an idle shm ring).
  for (unsigned i = 1; !work.done(); ++i) {
    const bool check_time = (i & 63) == 0;
    run_available(check_time);
    if (work.done()) break;
    if (check_time) {
      const auto now = Clock::now();
      if (const uint64_t seen = cq_->activity(); seen != activity) {
        activity = seen;
        if (policy_ == WaitPolicy::kHybrid) spin_end = std::min(until, now + spin_time_);
      }
      if (now >= spin_end) break;
    }
    // With more ranks than cores the peer we wait for may be waiting for our core: give it
    // up on every idle pass (Open MPI's yield_when_idle). Messages also need the provider's
    // progress thread (it moves rendezvous data), which may share our core: yield now and
    // then. A collective on the segment needs no other thread: only after a long spin (1024
    // passes), so that a short wait, the common case, makes no system call.
    const bool segment_only = active_ && !active_->schedule && p2p_.empty();
    if (oversubscribed_ || (i & (segment_only ? 1023 : 63)) == 0)
      sched_yield();
    else
      cpu_relax();
  }
  end_driving();
  // We sleep next, and the engine thread sleeps until a completion: the provider's own
  // thread must read the sockets again (it steps aside while a driver polls them).
  if (!work.done()) cq_->hand_off_progress();
}

void CommEngine::drive_in_background() {
  if (!segment_) return;
  // Nobody will wait for it: the lent poll's grace ends now, and the engine thread, woken,
  // takes it over.
  segment_->own().grace_until.store(0, std::memory_order_release);
  cq_->interrupt();
}

void CommEngine::drive_once() {
  std::unique_lock drive(drive_mu_, std::try_to_lock);
  if (!drive.owns_lock()) return;
  DriverMark mark(driver_);
  run_available();
}

}  // namespace plait::coll
