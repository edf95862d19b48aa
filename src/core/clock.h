// Monotonic time and deadlines. Every wait in plait takes a Deadline, so none is unbounded.
#pragma once

#include <sys/resource.h>

#include <chrono>

namespace plait {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  static Deadline after(std::chrono::nanoseconds d) { return Deadline(Clock::now() + d); }
  explicit Deadline(Clock::time_point at) : at_(at) {}

  Clock::time_point at() const { return at_; }
  bool expired() const { return Clock::now() >= at_; }
  // Time left, never negative.
  std::chrono::nanoseconds remaining() const {
    auto left = at_ - Clock::now();
    return left.count() > 0 ? std::chrono::duration_cast<std::chrono::nanoseconds>(left)
                            : std::chrono::nanoseconds(0);
  }
  int remaining_ms() const {  // for poll(2): rounds up so a short wait is not a busy loop
    auto ns = remaining().count();
    return ns <= 0 ? 0 : static_cast<int>((ns + 999999) / 1000000);
  }

 private:
  Clock::time_point at_;
};

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// User + sys seconds of this process so far, every thread included (engine, progress,
// completion threads): what benchmarks report as CPU cost.
inline double process_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace plait
