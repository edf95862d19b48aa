#include "plait/run/watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "plait/error.h"

namespace plait::cli {
namespace {

// The launcher's messages: a positive group id to watch, a negative one to forget, zero for
// "the job ended in order".
constexpr int32_t kJobDone = 0;

// Runs in the forked helper: async-signal-safe calls only, into memory allocated before fork.
[[noreturn]] void helper_main(int from_launcher, pid_t* groups, size_t capacity) {
  ::prctl(PR_SET_NAME, "plait-watchdog");
  // Nothing of the launcher's may stay open here: not its output (a reader of the launcher's
  // stdout would wait for us), not the store's socket, not the write end of our own pipe.
  if (from_launcher > 0) ::close_range(0, static_cast<unsigned>(from_launcher) - 1, 0);
  ::close_range(static_cast<unsigned>(from_launcher) + 1, ~0U, 0);

  size_t count = 0;
  for (;;) {
    int32_t message = 0;
    size_t got = 0;
    while (got < sizeof message) {
      ssize_t n =
          ::read(from_launcher, reinterpret_cast<char*>(&message) + got, sizeof message - got);
      if (n > 0) {
        got += static_cast<size_t>(n);
      } else if (n == 0 || errno != EINTR) {
        break;
      }
    }
    if (got < sizeof message) break;  // the launcher is gone without saying "done"
    if (message == kJobDone) ::_exit(0);
    if (message > 0 && count < capacity) groups[count++] = message;
    for (size_t i = 0; message < 0 && i < count; ++i) {
      if (groups[i] == -message) {
        groups[i] = groups[--count];
        break;
      }
    }
  }
  for (size_t i = 0; i < count; ++i) ::kill(-groups[i], SIGKILL);
  ::_exit(0);
}

}  // namespace

Watchdog::Watchdog(size_t max_groups) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw system_error("plait run: cannot create a pipe", errno);
  net::Fd from_launcher(fds[0]);
  to_helper_ = net::Fd(fds[1]);
  std::vector<pid_t> groups(max_groups);

  // The helper keeps every signal blocked for good: a Ctrl-C or SIGHUP aimed at the launcher's
  // process group must not take the cleanup down with it, and no handler of ours may run there.
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &previous);
  pid_t pid = ::fork();
  if (pid == 0) helper_main(from_launcher.get(), groups.data(), groups.size());
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) throw system_error("plait run: cannot fork the watchdog", fork_errno);
  pid_ = pid;
}

Watchdog::~Watchdog() {
  send(kJobDone);
  to_helper_.reset();
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

void Watchdog::watch(pid_t group) { send(static_cast<int32_t>(group)); }

void Watchdog::forget(pid_t group) { send(-static_cast<int32_t>(group)); }

void Watchdog::send(int32_t message) {
  // Four bytes are written atomically. Should the helper be gone (only SIGKILL does that),
  // the write fails with EPIPE and the job goes on without its safety net.
  while (::write(to_helper_.get(), &message, sizeof message) < 0 && errno == EINTR) {
  }
}

}  // namespace plait::cli
