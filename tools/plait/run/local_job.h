// A job of N ranks on this host: the engine behind `plait run` and launch_local_job().
//
// The launcher process hosts the job's store, starts the ranks, relays their output with a
// rank prefix, forwards SIGINT/SIGTERM/SIGHUP, and when one rank fails stops the others (SIGTERM,
// then SIGKILL after a grace period). It returns only when every rank and everything the
// ranks started in their process groups is gone.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/config.h"
#include "plait/run/launcher_settings.h"

namespace plait::cli {

// Exit statuses of a job besides the ranks' own (shell conventions).
inline constexpr int kExitTimedOut = 124;       // --timeout ran out (as timeout(1))
inline constexpr int kExitCannotExecute = 126;  // found but not executable
inline constexpr int kExitCommandNotFound = 127;

struct LocalJobOptions {
  int nranks = 1;
  std::vector<std::string> command;  // argv of every rank; argv[0] is looked up in PATH
  // Time the ranks get between SIGTERM (or a forwarded SIGINT) and SIGKILL.
  std::chrono::milliseconds grace = LauncherSettings{}.grace;
  // Wall-clock limit of the whole job; zero means none.
  std::chrono::milliseconds timeout{0};
  // CPU binding (PLAIT_BIND, --bind): "core" binds rank i to the i-th CPU the launcher may
  // use (round robin), "auto" does so only when there are at least as many CPUs as ranks
  // (as Open MPI binds to cores), "none" (the default) leaves the scheduler free: a rank's
  // helper threads then need not wait for its core (torch's 8 B all_reduce at np=2 took
  // 6.3 µs bound against 3.3-5.5 unbound).
  std::string bind = LauncherSettings{}.bind;
  // Restarts (plait run --max-restarts): this start's number and the limit, given to the
  // ranks as PLAIT_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT and TORCHELASTIC_MAX_RESTARTS.
  int restart_count = 0;
  int max_restarts = 0;
  // plait run --enable-recovery: a rank that fails is reported but does not stop the others,
  // whose communicators shrink() past it (in-job recovery). The job's status is then 0 when
  // at least one rank exited 0, else the first failing rank's.
  bool enable_recovery = false;
};

// How a job ended, beyond its status: whether a rank failed (the job could be restarted),
// as opposed to success, an interruption, a timeout, or a command that cannot start.
struct JobEnd {
  bool rank_failed = false;
};

// A job's options as `plait bench -n` and `plait tune -n` start it: PLAIT_RUN_GRACE_S and
// PLAIT_BIND from the environment, as `plait run` reads them.
LocalJobOptions local_job_from_env(int nranks, std::vector<std::string> command);

// The CPU each rank is bound to (-1: not bound), from the launcher's own affinity mask.
std::vector<int> plan_binding(const std::string& bind, int nranks);

// Runs the job to its end and returns its exit status: 0 when every rank exited 0, else the
// first failing rank's status (128 + signal when it was killed), 128 + signal when the
// launcher was interrupted, or one of the kExit* values above. Failures are reported on
// stderr, one line each, starting with "plait run: ".
// Throws plait::Error when the job cannot be set up (store, pipes, fork); ranks already
// started are killed and reaped before the exception leaves.
// One job at a time per process: it owns the process's SIGINT/SIGTERM/SIGHUP/SIGCHLD handling.
int run_local_job(const LocalJobOptions& options, JobEnd* end = nullptr);

// run_local_job, started again (every rank, with a new store) after a rank fails, up to
// options.max_restarts times; says so on stderr each time. Returns the last start's status.
int run_local_job_with_restarts(LocalJobOptions options);

// "2.5" -> 2500 ms. Throws plait::Error(kInvalidUsage) naming `what` unless `text` is a
// non-negative number of seconds.
std::chrono::milliseconds parse_seconds(const std::string& text, const std::string& what);
// PLAIT_RUN_GRACE_S, from the settings registry.
std::chrono::milliseconds grace_from_env();
// PLAIT_BIND, likewise.
std::string bind_from_env();

}  // namespace plait::cli
