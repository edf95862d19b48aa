// Starting one rank, and describing how a process ended.
//
// A rank is fork + exec'd as the leader of its own process group, so the launcher can signal
// the rank together with everything it started, and a terminal's Ctrl-C reaches only the
// launcher, which forwards it. stdin is /dev/null (N ranks cannot share a terminal's input),
// stdout and stderr go into pipes the launcher reads. If the launcher dies without cleaning
// up (SIGKILL), the kernel kills the rank: without the launcher's store it could only hang.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/socket.h"
#include "plait/run/signals.h"

namespace plait::cli {

struct SpawnedRank {
  pid_t pid = -1;      // also its process group id
  int exec_errno = 0;  // non-zero: the command could not be executed; the child is reaped
  net::Fd out;         // read ends of its stdout and stderr, non-blocking
  net::Fd err;
};

// Starts `command` (argv[0] looked up in PATH like execvp) with exactly `environment`
// ("KEY=value" entries), bound to CPU `cpu` unless it is -1 (set before exec, so every thread
// the rank starts inherits it). Throws plait::Error(kSystem) when pipes or fork fail; an exec failure
// is not thrown but returned in exec_errno, because it is the command's fault, not plait's.
SpawnedRank spawn_rank(const std::vector<std::string>& command,
                       const std::vector<std::string>& environment, int stdin_fd,
                       const SignalPipe& signals, int cpu = -1);

// "SIGKILL" for 9.
std::string signal_name(int sig);
// "exited with status 3", "was killed by signal 9 (SIGKILL)", from a waitpid() status.
std::string describe_exit(int wait_status);
// The status a shell would report: the exit code, or 128 + the signal number.
int shell_status(int wait_status);

}  // namespace plait::cli
