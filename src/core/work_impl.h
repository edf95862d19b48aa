// The Work handle behind every non-blocking call: completed once by whoever drives the
// communicator's engine, waited on by any number of user threads.
//
// Waiting drives: a thread in wait() or test() first lends itself to the engine (see
// WorkDriver), so under the spin and hybrid wait policies the operation completes in the
// waiting thread without a wake-up hop; a futex on the Work's state word is the fallback for
// the rest (a condition variable would cost its construction and destruction on every call).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "plait/work.h"

namespace plait {

class WorkImpl;

// What a waiting thread can lend itself to (the communicator's engine).
class WorkDriver {
 public:
  virtual ~WorkDriver() = default;
  // Runs the engine in the calling thread until `work` is done, the wait policy's spin
  // budget is spent or `limit` has passed, whichever is first. May return at once (block
  // policy). Returns the time at which `limit` runs out, or {} if it never read the clock.
  virtual Clock::time_point drive(const WorkImpl& work, std::chrono::milliseconds limit) = 0;
  // One non-blocking pass, if nobody else is driving.
  virtual void drive_once() = 0;
  // Nobody may wait for `work` (a callback consumes it): the engine's own thread must take
  // it over now rather than when the submitter's grace as a poller runs out.
  virtual void drive_in_background() = 0;
};

// What a Work is, for messages; composed into text only when one is needed (a per-call
// string would cost more than a small collective over shared memory).
struct WorkLabel {
  std::string_view op;   // a static name: "allreduce", "send", "recv"
  int64_t seq = -1;      // collectives: the sequence number
  size_t bytes = 0;
  int peer = -1;         // point-to-point: the other rank (kAnySource: any)
  uint32_t tag = 0;
  // "allreduce #3 (4096 bytes)", "send to rank 2 (tag 7)", "recv from any rank (tag 0)"
  std::string describe() const;
};

class WorkImpl : public Work {
 public:
  // `algorithm` must outlive the Work (a static name).
  // `rank`: the calling rank, named in the Work's own errors (with the label's op, peer and
  // sequence number; the context is built when an error needs it, not per call).
  // `timed`: record when it starts (mark_started) and finishes (times()).
  WorkImpl(WorkLabel label, std::chrono::milliseconds default_timeout, int rank,
           const std::string* algorithm = nullptr, bool timed = false)
      : label_(label),
        algorithm_(algorithm ? algorithm : &kNoAlgorithm),
        default_timeout_(default_timeout),
        rank_(rank),
        timed_(timed) {}

  bool test() override;
  void wait(std::chrono::milliseconds timeout) override;
  void wait() override { wait(default_timeout_); }
  std::shared_ptr<const Error> error() const override;
  int source() const override;
  size_t bytes() const override;
  const std::string& algorithm() const override { return *algorithm_; }
  void on_complete(std::function<void()> callback) override;
  WorkTimes times() const override { return done() ? times_ : WorkTimes{}; }

  // Engine side. The first call wins; later ones are ignored. Calls never overlap: they come
  // from the thread driving the engine, or before the Work is handed out.
  void finish(std::shared_ptr<const Error> error, int source = -1, size_t bytes = 0);
  // The engine began running it (a collective) or posted it (a send or recv); a timed Work
  // only.
  void mark_started() {
    if (timed_) times_.started = Clock::now();
  }
  std::string description() const { return label_.describe(); }
  // Lock-free "finished yet?" for drivers' loops.
  bool done() const { return (state_.load(std::memory_order_acquire) & kDone) != 0; }
  void set_driver(std::weak_ptr<WorkDriver> driver) { driver_ = std::move(driver); }

 private:
  static const std::string kNoAlgorithm;
  const WorkLabel label_;
  const std::string* const algorithm_;
  const std::chrono::milliseconds default_timeout_;
  const int rank_;
  const bool timed_;
  WorkTimes times_;  // engine side until kDone, like the outcome
  std::weak_ptr<WorkDriver> driver_;
  // kDone: the outcome below is final (written before the flag, read after it). kWatched: a
  // callback waits in callbacks_ (set under mu_), so finish() takes mu_. kSleeping: a thread
  // sleeps on this word (a futex), so finish() wakes it. A Work nobody waits on, a small
  // collective's as a rule, takes no lock and makes no system call.
  static constexpr uint32_t kDone = 1, kWatched = 2, kSleeping = 4;
  std::atomic<uint32_t> state_{0};
  mutable std::mutex mu_;
  std::shared_ptr<const Error> error_;
  int source_ = -1;
  size_t bytes_ = 0;
  std::vector<std::function<void()>> callbacks_;
};

}  // namespace plait
