// The handle of a non-blocking operation: a communicator's collectives and point-to-point
// calls, and the parameter server's pushes and pulls, all return one.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "plait/error.h"

namespace plait {

// recv from any rank (Work::source() then says which).
inline constexpr int kAnySource = -1;

// When an operation ran, for tracers (plait.torch.timeline): asked for per call with
// CallOptions::timed. `started`: a collective, when the engine began it (it runs a
// communicator's collectives one at a time, so the time since the call was queued behind the
// ones before it); a send or recv, when it was posted to the transport. `finished`: when it
// completed. Both are steady_clock times (CLOCK_MONOTONIC); the default (epoch) where not
// recorded.
struct WorkTimes {
  std::chrono::steady_clock::time_point started{};
  std::chrono::steady_clock::time_point finished{};
};

class Work {
 public:
  virtual ~Work() = default;
  // True once the operation finished, successfully or not; never blocks.
  virtual bool test() = 0;
  // Blocks until finished or `timeout`, then throws the operation's plait::Error if it
  // failed, or a kTimeout error naming the op if time ran out (the op stays pending). Without
  // an argument it waits a little longer than the operation's own deadline, so a stuck
  // operation ends with the engine's precise error (what it waited for, from whom).
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  virtual void wait() = 0;
  // After completion: the error, if any (null on success).
  virtual std::shared_ptr<const Error> error() const = 0;
  // recv from kAnySource: the rank the message came from; bytes actually received.
  virtual int source() const = 0;
  virtual size_t bytes() const = 0;
  // Collectives: the algorithm that runs it ("ring"), whether forced or chosen by the cost
  // model; empty for send/recv.
  virtual const std::string& algorithm() const = 0;
  // Runs `callback` once the operation has finished (successfully or not), in the thread that
  // finishes it, or at once in this thread if it already has. The callback must be quick and
  // must not call into the communicator (hand the news to a thread of your own), because the
  // thread that runs it may be driving the engine. Several callbacks run in the order given;
  // one may still be running when wait() returns.
  virtual void on_complete(std::function<void()> callback) = 0;
  // After completion, for a call made with CallOptions::timed: when it started and finished
  // (see WorkTimes); otherwise the defaults.
  virtual WorkTimes times() const { return {}; }
};
using WorkPtr = std::shared_ptr<Work>;

}  // namespace plait
