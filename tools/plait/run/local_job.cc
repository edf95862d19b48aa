#include "plait/run/local_job.h"

#include "core/config.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "core/auth.h"
#include "core/clock.h"
#include "core/socket.h"
#include "plait/commands.h"
#include "plait/error.h"
#include "plait/run/env.h"
#include "plait/run/launcher_settings.h"
#include "plait/run/output.h"
#include "plait/run/signals.h"
#include "plait/run/spawn.h"
#include "plait/run/stall_request.h"
#include "plait/run/watchdog.h"
#include "plait/store.h"

namespace plait::cli {
namespace {

using std::chrono::milliseconds;

// After the last rank exits, how long its leftover output may take to arrive. Only a process
// that left the rank's process group (setsid) can hold a pipe open past this.
constexpr milliseconds kDrainAfterExit{2000};
// poll() never sleeps longer than this, so a lost wake-up costs at most this much.
constexpr int kMaxPollMs = 1000;

void say(const std::string& text) { write_all_or_drop(2, "plait run: " + text + "\n"); }

std::string plural(size_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string seconds_text(milliseconds d) {
  std::ostringstream out;
  out << static_cast<double>(d.count()) / 1000.0 << " s";
  return out.str();
}

class LocalJob {
 public:
  LocalJob(const LocalJobOptions& options, SignalPipe& signals, Watchdog& watchdog,
           StallRequests& stall_requests)
      : options_(options), signals_(signals), watchdog_(watchdog),
        stall_requests_(stall_requests), started_(Clock::now()) {}
  ~LocalJob();
  LocalJob(const LocalJob&) = delete;
  LocalJob& operator=(const LocalJob&) = delete;

  // Starts the ranks in order; stops at the first one whose command cannot be executed.
  void start(const JobIdentity& identity, int stdin_fd);
  // The event loop: relays output, handles signals and exits. Returns the job's status.
  int wait();
  // Whether the job ended because a rank failed (not an interruption, timeout or exec error).
  bool rank_failed() const { return rank_failed_; }

 private:
  struct Stream {
    net::Fd fd;
    LinePrefixer lines;
  };
  struct Rank {
    int index;
    pid_t pid;  // also its process group id
    bool running;
    Stream out;
    Stream err;
  };

  void reap_exited();
  void on_rank_exit(const Rank& rank, int wait_status);
  void on_signal(int sig);
  void check_deadlines();
  int poll_timeout_ms() const;
  // Sends `sig` to the process group of every running rank and arms the SIGKILL deadline.
  void begin_stop(int sig);
  void kill_all();
  void read_stream(Stream& stream);
  void close_stream(Stream& stream);
  size_t running_count() const;
  // "rank 2" or "ranks 0, 2": the ranks still running.
  std::string running_ranks() const;
  bool any_stream_open() const;

  const LocalJobOptions& options_;
  SignalPipe& signals_;
  Watchdog& watchdog_;
  StallRequests& stall_requests_;
  std::vector<Rank> ranks_;
  Clock::time_point started_;
  bool stopping_ = false;
  bool killed_ = false;
  int stop_signal_ = SIGTERM;
  std::optional<Clock::time_point> kill_at_;
  std::optional<Clock::time_point> drain_until_;
  int exit_status_ = 0;
  bool rank_failed_ = false;
  // --enable-recovery: whether some rank exited 0, and the first failure's status.
  bool any_success_ = false;
  std::optional<int> first_failure_;
};

LocalJob::~LocalJob() {
  // Only reached with ranks running when an exception cut the job short.
  for (Rank& rank : ranks_) {
    if (!rank.running) continue;
    ::kill(-rank.pid, SIGKILL);
    watchdog_.forget(rank.pid);
    while (::waitpid(rank.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

void LocalJob::start(const JobIdentity& identity, int stdin_fd) {
  std::vector<std::string> inherited = current_environment();
  // The ranks' stderr is a pipe to us: where ours is a terminal, a rank's progress display
  // (PLAIT_PROGRESS, tools/plait/sort/phase_progress.h) is wanted all the same, unless set.
  if (::isatty(STDERR_FILENO) == 1 &&
      std::none_of(inherited.begin(), inherited.end(),
                   [](const std::string& e) { return e.starts_with("PLAIT_PROGRESS="); }))
    inherited.push_back("PLAIT_PROGRESS=1");
  const std::vector<int> cpu = plan_binding(options_.bind, options_.nranks);
  ranks_.reserve(static_cast<size_t>(options_.nranks));
  for (int r = 0; r < options_.nranks; ++r) {
    SpawnedRank spawned = spawn_rank(options_.command, rank_environment(inherited, identity, r),
                                     stdin_fd, signals_, cpu[static_cast<size_t>(r)]);
    if (spawned.exec_errno != 0) {
      exit_status_ = spawned.exec_errno == ENOENT ? kExitCommandNotFound : kExitCannotExecute;
      std::string text =
          "cannot execute '" + options_.command[0] + "': " + ::strerror(spawned.exec_errno);
      if (size_t started = running_count(); started > 0) {
        text += "; stopping the " + plural(started, "rank") + " already started";
      }
      say(text);
      begin_stop(SIGTERM);
      return;
    }
    watchdog_.watch(spawned.pid);
    std::string prefix = std::to_string(r);  // built in steps: GCC 12 misreports "[" + s
    prefix.insert(prefix.begin(), '[');
    prefix += "] ";
    Rank rank{r,
              spawned.pid,
              true,
              {std::move(spawned.out), LinePrefixer(prefix, 1)},
              {std::move(spawned.err), LinePrefixer(prefix, 2)}};
    ranks_.push_back(std::move(rank));
  }
}

int LocalJob::wait() {
  std::vector<pollfd> fds;
  std::vector<Stream*> fd_streams;
  for (;;) {
    reap_exited();
    check_deadlines();
    if (running_count() == 0) {
      if (!drain_until_) drain_until_ = Clock::now() + kDrainAfterExit;
      if (!any_stream_open() || Clock::now() >= *drain_until_) break;
    }

    fds.assign(1, pollfd{signals_.fd(), POLLIN, 0});
    fd_streams.assign(1, nullptr);
    for (Rank& rank : ranks_) {
      for (Stream* stream : {&rank.out, &rank.err}) {
        if (!stream->fd.valid()) continue;
        fds.push_back(pollfd{stream->fd.get(), POLLIN, 0});
        fd_streams.push_back(stream);
      }
    }
    if (::poll(fds.data(), fds.size(), poll_timeout_ms()) < 0) {
      if (errno == EINTR) continue;
      throw system_error("plait run: poll", errno);
    }
    for (int sig : signals_.take()) on_signal(sig);
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_stream(*fd_streams[i]);
    }
  }
  for (Rank& rank : ranks_) {
    close_stream(rank.out);
    close_stream(rank.err);
  }
  if (exit_status_ == 0 && first_failure_ && !any_success_) {
    exit_status_ = *first_failure_;
    rank_failed_ = true;
  }
  return exit_status_;
}

void LocalJob::reap_exited() {
  for (Rank& rank : ranks_) {
    if (!rank.running) continue;
    // WNOWAIT leaves the rank a zombie for now: its pid, and so its process group id, cannot
    // be reused while we still signal that group below.
    siginfo_t info{};
    if (::waitid(P_PID, rank.pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      rank.running = false;  // ECHILD: someone else in this process collected it
      say("rank " + std::to_string(rank.index) + " (pid " + std::to_string(rank.pid) +
          ") vanished: its exit status was collected outside plait run");
      on_rank_exit(rank, 1 << 8);
      continue;
    }
    if (info.si_pid == 0) continue;
    // Its last words come before any message about its death.
    read_stream(rank.out);
    read_stream(rank.err);
    ::kill(-rank.pid, SIGKILL);  // what it left running in its group would be an orphan
    watchdog_.forget(rank.pid);
    int status = 0;
    while (::waitpid(rank.pid, &status, 0) < 0 && errno == EINTR) {
    }
    rank.running = false;
    on_rank_exit(rank, status);
  }
}

void LocalJob::on_rank_exit(const Rank& rank, int wait_status) {
  bool failed = !(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0);
  if (!failed) any_success_ = true;
  if (!failed || stopping_) return;  // while stopping, deaths are the expected outcome
  std::string text = "rank " + std::to_string(rank.index) + " (pid " + std::to_string(rank.pid) +
                     ") " + describe_exit(wait_status);
  if (options_.enable_recovery) {
    if (!first_failure_) first_failure_ = shell_status(wait_status);
    if (size_t others = running_count(); others > 0)
      text += "; the other " + plural(others, "rank") + " go on (--enable-recovery)";
    say(text);
    return;
  }
  exit_status_ = shell_status(wait_status);
  rank_failed_ = true;
  if (size_t others = running_count(); others > 0) {
    text += "; stopping the other " + plural(others, "rank");
  }
  say(text);
  begin_stop(SIGTERM);
}

void LocalJob::on_signal(int sig) {
  // SIGCHLD needs nothing here: reap_exited() looks at every rank on each turn of the loop.
  if (sig == SIGUSR1) return stall_requests_.request();
  if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) return;
  const std::string name = signal_name(sig);
  if (!stopping_) {
    exit_status_ = 128 + sig;
    say("received " + name + "; passing it on to the " + plural(running_count(), "rank"));
    begin_stop(sig);
  } else if (!killed_ && running_count() > 0) {
    say("received " + name + " while stopping; killing the " + plural(running_count(), "rank"));
    kill_all();
  }
}

void LocalJob::check_deadlines() {
  Clock::time_point now = Clock::now();
  if (!stopping_ && options_.timeout.count() > 0 && now >= started_ + options_.timeout &&
      running_count() > 0) {
    exit_status_ = kExitTimedOut;
    // Naming them tells a hang (one rank stuck, say at exit) from a job that was slow.
    say("the job ran past its timeout of " + seconds_text(options_.timeout) + "; stopping " +
        running_ranks() + ", still running");
    begin_stop(SIGTERM);
  }
  if (stopping_ && !killed_ && kill_at_ && now >= *kill_at_ && running_count() > 0) {
    say(plural(running_count(), "rank") + " still running " + seconds_text(options_.grace) +
        " after " + signal_name(stop_signal_) + "; sending SIGKILL");
    kill_all();
  }
}

int LocalJob::poll_timeout_ms() const {
  std::optional<Clock::time_point> next;
  auto consider = [&](Clock::time_point t) { next = next ? std::min(*next, t) : t; };
  if (!stopping_ && options_.timeout.count() > 0) consider(started_ + options_.timeout);
  if (stopping_ && !killed_ && kill_at_) consider(*kill_at_);
  if (drain_until_) consider(*drain_until_);
  if (!next) return kMaxPollMs;
  return std::min(Deadline(*next).remaining_ms(), kMaxPollMs);
}

void LocalJob::begin_stop(int sig) {
  stopping_ = true;
  stop_signal_ = sig;
  kill_at_ = Clock::now() + options_.grace;
  for (const Rank& rank : ranks_) {
    if (rank.running) ::kill(-rank.pid, sig);
  }
}

void LocalJob::kill_all() {
  killed_ = true;
  for (const Rank& rank : ranks_) {
    if (rank.running) ::kill(-rank.pid, SIGKILL);
  }
}

void LocalJob::read_stream(Stream& stream) {
  char buf[64 * 1024];
  // Bounded, so that one chatty rank cannot starve the others or the signal pipe.
  for (int reads = 0; reads < 16 && stream.fd.valid(); ++reads) {
    ssize_t n = ::read(stream.fd.get(), buf, sizeof buf);
    if (n > 0) {
      stream.lines.feed(std::string_view(buf, static_cast<size_t>(n)));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      close_stream(stream);  // end of file, or an error that no retry will fix
    }
  }
}

void LocalJob::close_stream(Stream& stream) {
  if (!stream.fd.valid()) return;
  stream.lines.finish();
  stream.fd.reset();
}

size_t LocalJob::running_count() const {
  return static_cast<size_t>(
      std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
}

std::string LocalJob::running_ranks() const {
  std::string list;
  for (const Rank& r : ranks_)
    if (r.running) list += (list.empty() ? "" : ", ") + std::to_string(r.index);
  return (running_count() == 1 ? "rank " : "ranks ") + list;
}

bool LocalJob::any_stream_open() const {
  return std::any_of(ranks_.begin(), ranks_.end(),
                     [](const Rank& r) { return r.out.fd.valid() || r.err.fd.valid(); });
}

}  // namespace

int run_local_job(const LocalJobOptions& options, JobEnd* end) {
  if (options.nranks < 1) throw invalid_usage("the number of ranks must be at least 1");
  if (options.command.empty()) throw invalid_usage("no command to run");

  const std::string token = auth::random_token();
  TcpStoreServer store("127.0.0.1", 0, token);
  JobIdentity identity;
  identity.world_size = options.nranks;
  identity.store_host = "127.0.0.1";
  identity.store_port = store.port();
  identity.job_token = token;
  // Held until the job ends (torch's store on rank 0 binds it meanwhile).
  const PortReservation master_port = reserve_free_port("127.0.0.1");
  identity.master_port = master_port.port;
  identity.restart_count = options.restart_count;
  identity.max_restarts = options.max_restarts;

  net::Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull.valid()) throw system_error("plait run: cannot open /dev/null", errno);

  // Declared after the store so that the ranks are gone before the store goes away.
  StallRequests stall_requests(identity.store_host, identity.store_port, token, say);
  identity.stall_requests = stall_requests.path();
  SignalPipe signals;
  Watchdog watchdog(static_cast<size_t>(options.nranks));
  LocalJob job(options, signals, watchdog, stall_requests);
  job.start(identity, devnull.get());
  const int status = job.wait();
  if (end) end->rank_failed = job.rank_failed();
  return status;
}

int run_local_job_with_restarts(LocalJobOptions options) {
  for (options.restart_count = 0;; ++options.restart_count) {
    JobEnd end;
    const int status = run_local_job(options, &end);
    if (status == 0 || !end.rank_failed || options.restart_count >= options.max_restarts) {
      if (status != 0 && end.rank_failed && options.max_restarts > 0)
        std::fprintf(stderr, "plait run: giving up after %d restart%s\n", options.restart_count,
                     options.restart_count == 1 ? "" : "s");
      return status;
    }
    std::fprintf(stderr, "plait run: restarting every rank (restart %d of %d)\n", options.restart_count + 1,
                 options.max_restarts);
  }
}

std::chrono::milliseconds parse_seconds(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !std::isfinite(seconds) ||
      seconds < 0) {
    throw invalid_usage(what + " must be a number of seconds, not '" + text + "'");
  }
  return milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
}

std::chrono::milliseconds grace_from_env() { return Config::from_env().get<LauncherSettings>().grace; }

std::string bind_from_env() { return Config::from_env().get<LauncherSettings>().bind; }

std::vector<int> plan_binding(const std::string& bind, int nranks) {
  std::vector<int> cpu(static_cast<size_t>(std::max(nranks, 0)), -1);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (bind == "none" || ::sched_getaffinity(0, sizeof mask, &mask) != 0) return cpu;
  std::vector<int> usable;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) usable.push_back(c);
  // Oversubscribed: ranks that share a CPU wait for each other's time slices, where the
  // scheduler could have moved one to a CPU that just went idle.
  if (usable.empty() || (bind == "auto" && usable.size() < cpu.size())) return cpu;
  for (size_t r = 0; r < cpu.size(); ++r) cpu[r] = usable[r % usable.size()];
  return cpu;
}

LocalJobOptions local_job_from_env(int nranks, std::vector<std::string> command) {
  LocalJobOptions options;
  options.nranks = nranks;
  options.command = std::move(command);
  options.grace = grace_from_env();
  options.bind = bind_from_env();
  return options;
}

int launch_local_job(int nranks, const std::vector<std::string>& command) {
  return run_local_job(local_job_from_env(nranks, command));
}

}  // namespace plait::cli
