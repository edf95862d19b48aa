#include "coll/work_impl.h"

#include <algorithm>

namespace plait::coll {

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
  std::unique_lock lock(mu_);
  state_.fetch_or(kWatched, std::memory_order_acq_rel);
  const bool finished = cv_.wait_until(lock, until, [&] { return done(); });
  if (!finished) {
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
  error_ = std::move(error);
  source_ = source;
  bytes_ = bytes;
  if ((state_.fetch_or(kDone, std::memory_order_acq_rel) & kWatched) == 0) return;
  std::vector<std::function<void()>> callbacks;
  {
    // A sleeper is in cv_.wait (the lock is free only then) or sees kDone before it sleeps;
    // a callback registered after this sees kDone and runs at once.
    std::lock_guard lock(mu_);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  // Outside the lock: a callback may read the outcome (error(), source()).
  for (auto& callback : callbacks) callback();
}

}  // namespace plait::coll
