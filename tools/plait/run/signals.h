// The launcher's signal handling. SIGINT, SIGTERM, SIGHUP, SIGCHLD and SIGUSR1 (a stall
// report: stall_request.h) become bytes on a pipe that
// the job's poll loop reads like any other event: no work happens inside a signal handler, and a
// signal that arrives between a check and poll() still wakes poll(). SIGPIPE is ignored so
// that a closed stdout (`plait run ... | head`) costs the launcher its output, not its life
// and with it the cleanup of the ranks.
#pragma once

#include <signal.h>

#include <array>
#include <vector>

#include "core/socket.h"

namespace plait::cli {

class SignalPipe {
 public:
  // Installs the handlers. Dispositions are process-wide, so only one SignalPipe may be alive
  // at a time: a second one throws plait::Error(kInvalidUsage).
  SignalPipe();
  // Puts back the dispositions found at construction.
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // Readable when signals arrived; for poll().
  int fd() const { return read_end_.get(); }
  // The signals received since the last call, oldest first. Never blocks.
  std::vector<int> take();
  // For a forked child before exec: every signal this object changed goes back to SIG_IGN if
  // the process ignored it before, else to SIG_DFL. Async-signal-safe.
  void reset_in_child() const noexcept;

 private:
  static constexpr std::array<int, 6> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGUSR1};
  net::Fd read_end_;
  net::Fd write_end_;
  std::array<struct sigaction, kSignals.size()> previous_{};
};

}  // namespace plait::cli
