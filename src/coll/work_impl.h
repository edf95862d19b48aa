// The Work handle behind every non-blocking call: completed once by whoever drives the
// communicator's engine, waited on by any number of user threads.
//
// Waiting drives: a thread in wait() or test() first lends itself to the engine (see
// WorkDriver), so under the spin and hybrid wait policies the operation completes in the
// waiting thread without a wake-up hop; the condition variable is the fallback for the rest.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "core/clock.h"
#include "plait/communicator.h"

namespace plait::coll {

class WorkImpl;

// What a waiting thread can lend itself to (the communicator's engine).
class WorkDriver {
 public:
  virtual ~WorkDriver() = default;
  // Runs the engine in the calling thread until `work` is done, the wait policy's spin
  // budget is spent or `until` passes, whichever is first. May return at once (block policy).
  virtual void drive(const WorkImpl& work, Clock::time_point until) = 0;
  // One non-blocking pass, if nobody else is driving.
  virtual void drive_once() = 0;
};

class WorkImpl : public Work {
 public:
  WorkImpl(std::string description, std::chrono::milliseconds default_timeout, ErrorContext ctx,
           std::string algorithm = {})
      : description_(std::move(description)),
        algorithm_(std::move(algorithm)),
        default_timeout_(default_timeout),
        ctx_(std::move(ctx)) {}

  bool test() override;
  void wait(std::chrono::milliseconds timeout) override;
  void wait() override { wait(default_timeout_); }
  std::shared_ptr<const Error> error() const override;
  int source() const override;
  size_t bytes() const override;
  const std::string& algorithm() const override { return algorithm_; }

  // Engine side. The first call wins; later ones are ignored.
  void finish(std::shared_ptr<const Error> error, int source = -1, size_t bytes = 0);
  const std::string& description() const { return description_; }
  // Lock-free "finished yet?" for drivers' loops.
  bool done() const { return done_flag_.load(std::memory_order_acquire); }
  void set_driver(std::weak_ptr<WorkDriver> driver) { driver_ = std::move(driver); }

 private:
  const std::string description_;  // "allreduce #3 (4096 bytes)"
  const std::string algorithm_;
  const std::chrono::milliseconds default_timeout_;
  const ErrorContext ctx_;
  std::weak_ptr<WorkDriver> driver_;
  std::atomic<bool> done_flag_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::shared_ptr<const Error> error_;
  int source_ = -1;
  size_t bytes_ = 0;
};

}  // namespace plait::coll
