// The cleanup that outlives a killed launcher.
//
// A launcher that is SIGKILLed (OOM killer, a scheduler's kill -9) cleans nothing up. The
// kernel then kills each rank's leader (PR_SET_PDEATHSIG, see run/spawn.h), but what a
// rank started itself would be orphaned. So a small helper process, forked before any rank,
// learns each rank's process group through a pipe and, when the pipe closes without the
// launcher's "job done", SIGKILLs every group it still knows. It blocks every signal
// (only SIGKILL stops it) and does nothing else.
#pragma once

#include <sys/types.h>

#include <cstddef>

#include "core/socket.h"

namespace plait::cli {

class Watchdog {
 public:
  // Forks the helper; it can watch at most `max_groups` groups at once. Throws plait::Error.
  explicit Watchdog(size_t max_groups);
  // Tells the helper the job ended in order, then reaps it.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Call right after a rank starts.
  void watch(pid_t group);
  // Call while the group's leader is still an unreaped zombie, so that its id cannot have
  // been reused by then.
  void forget(pid_t group);

 private:
  void send(int32_t message);

  pid_t pid_ = -1;
  net::Fd to_helper_;
};

}  // namespace plait::cli
