// A long command's progress, one phase at a time, on one terminal line that is redrawn in place
// (`plait sort run`'s read, map, shuffle, sort and write):
//
//   sort map      [##########..........]  50 %   1.00 / 2.00 GB   0.41 GB/s   2.4 s
//
// and, when a phase ends, the line it leaves behind:
//
//   sort map      done in 4.87 s (2.00 GB, 0.41 GB/s)
//
// A phase whose size is not known ahead shows what it has done and for how long. A thread
// redraws the line every 100 ms, so a phase that is one long call (a map, an exchange) still
// shows its time going by, and advance() is only a store. Redraws end in '\r' (plait run's
// launcher passes such a line through at once, with its rank prefix).
//
// Shown when PLAIT_PROGRESS=1, never when it is 0; unset, when stderr is a terminal. plait run
// sets PLAIT_PROGRESS=1 for its ranks when its own stderr is a terminal (theirs are pipes).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace plait::cli {

class PhaseProgress {
 public:
  // `enabled` false: every call does nothing. `out` is where lines go (stderr).
  PhaseProgress(std::string command, bool enabled, std::FILE* out = stderr);
  ~PhaseProgress();  // ends the phase in progress, if any
  PhaseProgress(const PhaseProgress&) = delete;
  PhaseProgress& operator=(const PhaseProgress&) = delete;

  // PLAIT_PROGRESS's answer for this process (see above).
  static bool wanted();

  // Starts `phase`; `total` bytes it will do, 0 when not known ahead. Ends the one before.
  void begin(const std::string& phase, uint64_t total = 0);
  // `done` bytes of the phase are done (absolute, not an increment).
  void advance(uint64_t done) { done_.store(done, std::memory_order_relaxed); }
  void end();

 private:
  using Clock = std::chrono::steady_clock;
  void redraw_until_stopped();
  void draw(bool final);  // with mutex_ held

  std::string command_;
  bool enabled_;
  std::FILE* out_;
  std::atomic<uint64_t> done_{0};
  std::mutex mutex_;  // guards what follows, and the drawing
  std::condition_variable wake_;
  std::string phase_;
  uint64_t total_ = 0;
  bool active_ = false, stopping_ = false;
  Clock::time_point started_;
  std::thread redrawer_;
};

}  // namespace plait::cli
