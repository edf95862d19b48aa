#include "coll/work_impl.h"

namespace plait::coll {

bool WorkImpl::test() {
  std::lock_guard lock(mu_);
  return done_;
}

void WorkImpl::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    throw timeout_error("Timed out after " + std::to_string(timeout.count()) +
                            " ms waiting for " + description_ +
                            " (it is still pending; its own deadline aborts the communicator)",
                        ctx_);
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

void WorkImpl::finish(std::shared_ptr<const Error> error, int source, size_t bytes) {
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
    source_ = source;
    bytes_ = bytes;
  }
  cv_.notify_all();
}

}  // namespace plait::coll
