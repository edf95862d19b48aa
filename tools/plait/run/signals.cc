#include "plait/run/signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "plait/error.h"

namespace plait::cli {
namespace {

// The handler can reach nothing but a global; -1 while no SignalPipe is alive.
std::atomic<int> g_signal_write_fd{-1};

extern "C" void forward_to_pipe(int sig) {
  int saved_errno = errno;
  int fd = g_signal_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    auto byte = static_cast<unsigned char>(sig);
    // The write end is non-blocking: when the pipe is full the byte is dropped, which is fine
    // because the pipe is then already readable and the loop re-checks every rank anyway.
    [[maybe_unused]] ssize_t n = ::write(fd, &byte, 1);
  }
  errno = saved_errno;
}

}  // namespace

SignalPipe::SignalPipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw system_error("plait run: pipe", errno);
  read_end_ = net::Fd(fds[0]);
  write_end_ = net::Fd(fds[1]);

  int expected = -1;
  if (!g_signal_write_fd.compare_exchange_strong(expected, write_end_.get())) {
    throw invalid_usage("plait run: another local job is already running in this process");
  }
  for (size_t i = 0; i < kSignals.size(); ++i) {
    struct sigaction action {};
    sigemptyset(&action.sa_mask);
    if (kSignals[i] == SIGPIPE) {
      action.sa_handler = SIG_IGN;
    } else {
      action.sa_handler = forward_to_pipe;
      // SA_RESTART keeps other threads' blocking calls (the store server's) undisturbed.
      action.sa_flags = SA_RESTART | (kSignals[i] == SIGCHLD ? SA_NOCLDSTOP : 0);
    }
    ::sigaction(kSignals[i], &action, &previous_[i]);
  }
}

SignalPipe::~SignalPipe() {
  for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  g_signal_write_fd.store(-1);
}

std::vector<int> SignalPipe::take() {
  std::vector<int> signals;
  unsigned char buf[64];
  for (;;) {
    ssize_t n = ::read(read_end_.get(), buf, sizeof buf);
    if (n > 0) {
      signals.insert(signals.end(), buf, buf + n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return signals;  // EAGAIN: drained
  }
}

void SignalPipe::reset_in_child() const noexcept {
  for (size_t i = 0; i < kSignals.size(); ++i) {
    struct sigaction action {};
    sigemptyset(&action.sa_mask);
    action.sa_handler = previous_[i].sa_handler == SIG_IGN ? SIG_IGN : SIG_DFL;
    ::sigaction(kSignals[i], &action, nullptr);
  }
}

}  // namespace plait::cli
