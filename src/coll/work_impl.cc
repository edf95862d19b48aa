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
  // Done already (often, for a small collective): error_ was set before done_flag_.
  if (done()) {
    if (error_) throw *error_;
    return;
  }
  // Bounded so that a huge timeout cannot overflow the clock.
  const auto until = Clock::now() + std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 365));
  if (!done()) {
    if (auto driver = driver_.lock()) driver->drive(*this, until);
  }
  std::unique_lock lock(mu_);
  ++sleepers_;
  const bool finished = cv_.wait_until(lock, until, [&] { return done_; });
  --sleepers_;
  if (!finished) {
    throw timeout_error("Timed out after " + std::to_string(timeout.count()) +
                            " ms waiting for " + description() +
                            " (it is still pending; its own deadline aborts the communicator)",
                        ErrorContext{.rank = rank_, .peer = label_.peer, .op = std::string(label_.op),
                                     .seq = label_.seq});
  }
  if (error_) throw *error_;
}

std::shared_ptr<const Error> WorkImpl::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

int WorkImpl::source() const {
  std::lock_guard lock(mu_);
  return source_;
}

size_t WorkImpl::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

void WorkImpl::on_complete(std::function<void()> callback) {
  {
    std::lock_guard lock(mu_);
    if (!done_) {
      callbacks_.push_back(std::move(callback));
      if (auto driver = driver_.lock()) driver->drive_in_background();
      return;
    }
  }
  callback();
}

void WorkImpl::finish(std::shared_ptr<const Error> error, int source, size_t bytes) {
  std::vector<std::function<void()>> callbacks;
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
    source_ = source;
    bytes_ = bytes;
    done_flag_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
    // A waiter that counts itself after this saw done_ under the lock and will not sleep.
    wake = sleepers_ > 0;
  }
  if (wake) cv_.notify_all();
  // Outside the lock: a callback may read the outcome (error(), source()).
  for (auto& callback : callbacks) callback();
}

}  // namespace plait::coll
