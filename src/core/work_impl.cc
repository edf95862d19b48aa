#include "core/work_impl.h"

#include <algorithm>
#include <climits>

#include "core/futex.h"

namespace plait {

const std::string WorkImpl::kNoAlgorithm;

std::string WorkLabel::describe() const {
  if (seq >= 0)
    return std::string(op) + " #" + std::to_string(seq) + " (" + std::to_string(bytes) + " bytes)";
  std::string who = peer == kAnySource ? "any rank" : "rank " + std::to_string(peer);
  return std::string(op) + (op == "send" ? " to " : " from ") + who + " (tag " +
         std::to_string(tag) + ")";
}

bool WorkImpl::test() {
  if (done()) return true;
  if (auto driver = driver_.lock()) driver->drive_once();
  return done();
}

void WorkImpl::wait(std::chrono::milliseconds timeout) {
  // Done already (often, for a small collective): error_ was set before kDone.
  if (done()) {
    if (error_) throw *error_;
    return;
  }
  // Bounded so that a huge timeout cannot overflow the clock.
  const auto limit = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 365));
  Clock::time_point until{};
  if (auto driver = driver_.lock()) until = driver->drive(*this, limit);
  if (done()) {
    if (error_) throw *error_;
    return;
  }
  if (until == Clock::time_point{}) until = Clock::now() + limit;
  // Sleeps while the word still says "not done, a sleeper": finish() sets kDone before it
  // wakes, so a wake-up between our look and our sleep is never lost.
  uint32_t state = state_.fetch_or(kSleeping, std::memory_order_acq_rel) | kSleeping;
  while ((state & kDone) == 0) {
    const auto left = until - Clock::now();
    if (left <= Clock::duration::zero()) break;
    futex_wait(&state_, state, left);
    state = state_.load(std::memory_order_acquire);
  }
  if (!done()) {
    throw timeout_error("Timed out after " + std::to_string(timeout.count()) +
                            " ms waiting for " + description() +
                            " (it is still pending; its own deadline aborts the communicator)",
                        ErrorContext{.rank = rank_, .peer = label_.peer, .op = std::string(label_.op),
                                     .seq = label_.seq});
  }
  if (error_) throw *error_;
}

// The outcome is readable once done() says so; before, it is the defaults.
std::shared_ptr<const Error> WorkImpl::error() const {
  return done() ? error_ : nullptr;
}

int WorkImpl::source() const { return done() ? source_ : -1; }

size_t WorkImpl::bytes() const { return done() ? bytes_ : 0; }

void WorkImpl::on_complete(std::function<void()> callback) {
  {
    std::lock_guard lock(mu_);
    // finish() sees the mark and takes the lock, so it finds the callback we add below;
    // or it has marked the Work done already, and we run the callback now.
    if ((state_.fetch_or(kWatched, std::memory_order_acq_rel) & kDone) == 0) {
      callbacks_.push_back(std::move(callback));
      if (auto driver = driver_.lock()) driver->drive_in_background();
      return;
    }
  }
  callback();
}

void WorkImpl::finish(std::shared_ptr<const Error> error, int source, size_t bytes) {
  if (done()) return;
  if (timed_) {
    times_.finished = Clock::now();
    // Failed before it began (refused, aborted while queued): it never ran.
    if (times_.started == Clock::time_point{}) times_.started = times_.finished;
  }
  error_ = std::move(error);
  source_ = source;
  bytes_ = bytes;
  const uint32_t before = state_.fetch_or(kDone, std::memory_order_acq_rel);
  if ((before & (kWatched | kSleeping)) == 0) return;
  // The caller holds a reference (the engine's call), so the word outlives the wake-up.
  if (before & kSleeping) futex_wake(&state_, INT_MAX);
  if ((before & kWatched) == 0) return;
  std::vector<std::function<void()>> callbacks;
  {
    // A callback registered after this sees kDone and runs at once.
    std::lock_guard lock(mu_);
    callbacks.swap(callbacks_);
  }
  // Outside the lock: a callback may read the outcome (error(), source()).
  for (auto& callback : callbacks) callback();
}

}  // namespace plait
