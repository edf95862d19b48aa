// Who runs a communicator's engine: the thread that submits a call starts it when nobody
// drives; a thread that waits drives the engine itself for its spin budget (PLAIT_WAIT); the
// engine thread takes over, asleep on its completion queue and its segment doorbell, when
// nobody does (who rings whom on the segment: collective_segment.h).
#include <sched.h>

#include "coll/engine/comm_engine.h"
#include "coll/engine/internal.h"
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
  driving_ = true;  // the queue's active polling starts with the first look at it
  poll_credit_ = false;  // a submitter's lent poll is taken up by whoever drives next
  // We poll: publishers need not ring us (the first driver of a loop writes this; the
  // others find it set).
  if (segment_) ring_after(segment::kRingNever);
}

void CommEngine::end_driving(bool lend) {
  if (polling_cq_) cq_->end_active_polling();
  driving_ = polling_cq_ = false;
  // With no round in progress nobody rings us, whatever we asked: the next round starts in
  // a thread that asks again (a driver, or the engine thread before its pass).
  if (!segment_ || !active_ || !active_->on_segment || active_done()) return;
  if (lend && policy_ != WaitPolicy::kBlock) {
    // The caller waits next, and polls. If its peers may wait for it meanwhile (a later
    // round, a flag not raised yet), they ring the engine thread only after a grace period:
    // an asynchronous call, not waited for, goes on in the background.
    poll_credit_ = true;
    ++credits_lent_;
    if (active_owes_peers())
      ring_after((Clock::now() + spin_time_).time_since_epoch().count());
    return;
  }
  // A peer that published while we polled did not ring us; whatever it published after our
  // last pass is taken now, and from here on a peer rings the engine thread instead.
  ring_after(segment::kRingNow);
  run_available(false);
}

void CommEngine::poll_cq_as_driver() {
  if (!driving_ || polling_cq_) return;
  cq_->begin_active_polling();
  polling_cq_ = true;
}

void CommEngine::ring_after(int64_t when) {
  std::atomic<int64_t>& word = segment_->own().ring_after;
  // drive_mu_ is held: nobody else writes it, and a loop rewrites nothing.
  if (word.load(std::memory_order_relaxed) != when) word.store(when, std::memory_order_seq_cst);
}

// drive_mu_ held, by the engine thread before its pass. A submitter lent its poll to the wait
// it is about to begin: taking it over too early has peers ring us on every call, and every
// ring wakes this thread to contend for the drive lock with the caller. Returns when to look
// again.
Clock::time_point CommEngine::take_over_lent_poll() {
  const bool background = background_.exchange(false, std::memory_order_acq_rel);
  if (!poll_credit_ || background) {
    poll_credit_ = false;
    ring_after(segment::kRingNow);
    return Clock::time_point::max();
  }
  const auto now = Clock::now();
  const int64_t after = segment_->own().ring_after.load(std::memory_order_relaxed);
  if (after == segment::kRingNever) {
    // Its run owes the peers nothing: it ends whenever anybody looks. Somebody should, in
    // time: this thread, a grace period after it first saw the credit.
    if (credit_seen_ != credits_lent_) {
      credit_seen_ = credits_lent_;
      credit_seen_at_ = now;
    }
    if (now < credit_seen_at_ + spin_time_) return credit_seen_at_ + spin_time_;
  } else if (now.time_since_epoch().count() < after) {
    return Clock::time_point(Clock::duration(after));
  }
  poll_credit_ = false;
  ring_after(segment::kRingNow);
  return Clock::time_point::max();
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
      const auto credit_end = segment_ ? take_over_lent_poll() : Clock::time_point::max();
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

Clock::time_point CommEngine::drive(const WorkImpl& work, std::chrono::milliseconds limit) {
  if (policy_ == WaitPolicy::kBlock) return {};  // the engine thread does it; we sleep
  // The clock is read every 64 passes, the first time included: a wait that ends sooner (a
  // small collective's, as a rule) never reads it, and its budgets start a few passes late.
  // Hybrid spins until spin_time passes without activity on the queue, not spin_time in
  // all: a large message moves for hundreds of microseconds, and a driver that went to
  // sleep in the middle of it handed every later step to two thread wake-ups (tcp 1 MiB
  // allreduce np=2: ~650 us instead of ~320).
  Clock::time_point until{}, spin_end{};
  uint64_t activity = 0;
  auto spin_spent = [&] {
    const auto now = Clock::now();
    const uint64_t seen = cq_->activity();
    if (until == Clock::time_point{}) {
      until = now + limit;
      spin_end = policy_ == WaitPolicy::kSpin ? until : std::min(until, now + spin_time_);
    } else if (seen != activity && policy_ == WaitPolicy::kHybrid) {
      spin_end = std::min(until, now + spin_time_);
    }
    activity = seen;
    return now >= spin_end;
  };
  // Never block on the lock: another waiter may hold it for its whole wait (under kSpin, up
  // to its own timeout). Its passes progress our operation too; we watch our Work and take
  // over when the lock is free, and leave at our spin budget like a driver would.
  std::unique_lock drive(drive_mu_, std::defer_lock);
  for (unsigned i = 1; !drive.try_lock(); ++i) {
    if (work.done()) return until;
    if ((i & 63) == 0 && spin_spent()) {
      // The driver may finish its own work and leave ours to the provider's thread.
      cq_->hand_off_progress();
      return until;
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
    if (check_time && spin_spent()) break;
    // With more ranks than cores the peer we wait for may be waiting for our core: give it
    // up on every idle pass (Open MPI's yield_when_idle). Messages also need the provider's
    // progress thread (it moves rendezvous data), which may share our core: yield now and
    // then. A collective on the segment needs no other thread: only after a long spin (1024
    // passes), so that a short wait, the common case, makes no system call.
    const bool segment_only = active_ && active_->on_segment && p2p_.empty();
    if (oversubscribed_ || (i & (segment_only ? 1023 : 63)) == 0)
      sched_yield();
    else
      cpu_relax();
  }
  end_driving();
  // We sleep next, and the engine thread sleeps until a completion: the provider's own
  // thread must read the sockets again (it steps aside while a driver polls them).
  if (!work.done()) cq_->hand_off_progress();
  return until;
}

void CommEngine::drive_in_background() {
  if (!segment_) return;
  // Nobody will wait for it: the engine thread, woken, takes the lent poll over now.
  background_.store(true, std::memory_order_release);
  cq_->interrupt();
}

void CommEngine::drive_once() {
  std::unique_lock drive(drive_mu_, std::try_to_lock);
  if (!drive.owns_lock()) return;
  DriverMark mark(driver_);
  // Bracketed like any driver: a round this pass starts must be rung for when it leaves.
  begin_driving();
  run_available();
  end_driving();
}

}  // namespace plait::coll
