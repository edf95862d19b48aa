#include "plait/run/spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "plait/error.h"

namespace plait::cli {
namespace {

// The paths execvp would try for `name`, computed before fork: after fork in a process with
// threads (the store server's) only async-signal-safe calls are allowed, so no allocation.
std::vector<std::string> exec_candidates(const std::string& name) {
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return {name};
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::vector<std::string> candidates;
  size_t begin = 0;
  for (;;) {
    size_t end = dirs.find(':', begin);
    std::string dir = dirs.substr(begin, end == std::string::npos ? end : end - begin);
    candidates.push_back((dir.empty() ? "." : dir) + "/" + name);
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return candidates;
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const std::string& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

struct Pipe {
  net::Fd read_end;
  net::Fd write_end;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw system_error("plait run: cannot create a pipe", errno);
  return {net::Fd(fds[0]), net::Fd(fds[1])};
}

// Runs in the child between fork and exec: async-signal-safe calls only, never returns.
[[noreturn]] void exec_child(pid_t launcher, const std::vector<char*>& candidates,
                             char* const* argv, char* const* envp, int stdin_fd, int out_fd,
                             int err_fd, int report_fd, const SignalPipe& signals,
                             const cpu_set_t* cpu) {
  ::setpgid(0, 0);
  // Best effort: a mask the kernel refuses (a CPU gone offline since) leaves the rank free.
  if (cpu) ::sched_setaffinity(0, sizeof *cpu, cpu);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(127);  // the launcher died before prctl took effect
  signals.reset_in_child();
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  if (::dup2(stdin_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) {
    int err = errno;
    [[maybe_unused]] ssize_t n = ::write(report_fd, &err, sizeof err);
    ::_exit(127);
  }
  // The launcher's other descriptors (the store's socket, other ranks' pipes) are not the
  // rank's business; the error-report pipe is already close-on-exec and stays usable.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);

  // execvp's search rules: skip directories where the file is absent, remember a permission
  // error, stop on any other error.
  int err = ENOENT;
  bool denied = false;
  for (char* path : candidates) {
    if (path == nullptr) break;
    ::execve(path, argv, envp);
    err = errno;
    if (err == EACCES) {
      denied = true;
    } else if (err != ENOENT && err != ENOTDIR && err != ESTALE && err != ENODEV &&
               err != ETIMEDOUT) {
      break;
    }
  }
  if (denied && (err == ENOENT || err == ENOTDIR)) err = EACCES;
  [[maybe_unused]] ssize_t n = ::write(report_fd, &err, sizeof err);
  ::_exit(127);
}

// Waits for the child's report: end of file means exec succeeded (the report pipe is
// close-on-exec), an int is the errno of the failed exec.
int read_exec_errno(int fd) {
  int err = 0;
  size_t got = 0;
  while (got < sizeof err) {
    ssize_t n = ::read(fd, reinterpret_cast<char*>(&err) + got, sizeof err - got);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0) {
      return got == sizeof err ? err : 0;
    } else if (errno != EINTR) {
      return 0;
    }
  }
  return err;
}

}  // namespace

SpawnedRank spawn_rank(const std::vector<std::string>& command,
                       const std::vector<std::string>& environment, int stdin_fd,
                       const SignalPipe& signals, int cpu) {
  std::vector<std::string> candidate_paths = exec_candidates(command.empty() ? "" : command[0]);
  std::vector<char*> candidates = c_strings(candidate_paths);
  std::vector<char*> argv = c_strings(command);
  std::vector<char*> envp = c_strings(environment);
  Pipe out = make_pipe();
  Pipe err = make_pipe();
  Pipe report = make_pipe();
  pid_t launcher = ::getpid();
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (cpu >= 0) CPU_SET(cpu, &mask);

  // Signals stay blocked across fork so that no handler of the launcher runs in the child
  // before the child has put the default dispositions back.
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &previous);
  pid_t pid = ::fork();
  if (pid == 0) {
    exec_child(launcher, candidates, argv.data(), envp.data(), stdin_fd, out.write_end.get(),
               err.write_end.get(), report.write_end.get(), signals, cpu >= 0 ? &mask : nullptr);
  }
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) throw system_error("plait run: cannot fork", fork_errno);

  // Also set here: whichever of parent and child runs first, the group exists before the
  // launcher may signal it.
  ::setpgid(pid, pid);
  out.write_end.reset();
  err.write_end.reset();
  report.write_end.reset();

  SpawnedRank rank;
  rank.pid = pid;
  rank.exec_errno = read_exec_errno(report.read_end.get());
  if (rank.exec_errno != 0) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return rank;
  }
  net::set_nonblocking(out.read_end.get());
  net::set_nonblocking(err.read_end.get());
  rank.out = std::move(out.read_end);
  rank.err = std::move(err.read_end);
  return rank;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string describe_exit(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    return "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")" +
           (WCOREDUMP(wait_status) ? ", core dumped" : "");
  }
  return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
}

int shell_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return WEXITSTATUS(wait_status);
}

}  // namespace plait::cli
