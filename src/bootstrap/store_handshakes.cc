#include "bootstrap/store_handshakes.h"

#include <pthread.h>
#include <sys/socket.h>

#include <system_error>

#include "bootstrap/store_protocol.h"
#include "core/auth.h"
#include "core/clock.h"
#include "core/log.h"
#include "plait/error.h"

namespace plait {
namespace {

// Long enough for a loaded host, short enough that a silent client's slot comes back.
constexpr auto kHandshakeTimeout = std::chrono::seconds(30);

}  // namespace

StoreHandshakes::StoreHandshakes(std::string token, int limit, std::string server,
                                 std::function<void()> on_done)
    : token_(std::move(token)),
      limit_(limit),
      server_(std::move(server)),
      on_done_(std::move(on_done)) {}

StoreHandshakes::~StoreHandshakes() { stop(); }

bool StoreHandshakes::full() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(running_.size()) >= limit_;
}

void StoreHandshakes::start(net::Fd fd) {
  std::lock_guard lock(mu_);
  if (stopping_) return;  // fd closes here
  Handshake& h = running_.emplace_back();
  h.fd = fd.get();
  try {
    h.thread = std::thread([this, &h] { run(h); });
    // Named here, not by the thread, so that it carries the name from the moment it counts
    // (top -H, gdb, /proc/<pid>/task/<tid>/comm).
    ::pthread_setname_np(h.thread.native_handle(), kThreadName);
  } catch (const std::system_error& e) {
    running_.pop_back();
    log(LogLevel::kWarn, "store server on ", server_, ": cannot start a handshake thread (",
        e.what(), "); dropping the connection from ", net::peer_address(fd.get()));
    return;  // fd closes here
  }
  fd.release();
}

void StoreHandshakes::run(Handshake& h) {
  {
    // The descriptor becomes this thread's once start() has returned; taking the lock waits
    // for that.
    std::lock_guard lock(mu_);
  }
  net::Fd fd(h.fd);
  std::string error;
  // Nobody else sees a refused client, so the server says why it closed the door; a peer
  // that merely hung up (a port probe, a rank that died) is not worth a warning.
  LogLevel level = LogLevel::kWarn;
  try {
    net::set_nodelay(fd.get());
    auth::accept_handshake(fd.get(), token_, store_wire::kAuthLabel,
                           Deadline::after(kHandshakeTimeout));
  } catch (const Error& e) {
    error = e.what();
    if (e.category() == ErrorCategory::kRemote) level = LogLevel::kInfo;
  } catch (const std::exception& e) {
    error = e.what();
  }
  bool stopped;
  {
    std::lock_guard lock(mu_);
    h.done = true;
    stopped = stopping_;
    if (error.empty() && !stopped) authenticated_.push_back(std::move(fd));
  }
  if (!error.empty() && !stopped) log(level, "store server on ", server_, ": ", error);
  on_done_();
}

std::vector<net::Fd> StoreHandshakes::take_authenticated() {
  std::list<Handshake> finished;
  std::vector<net::Fd> ready;
  {
    std::lock_guard lock(mu_);
    for (auto it = running_.begin(); it != running_.end();) {
      auto next = std::next(it);
      if (it->done) finished.splice(finished.end(), running_, it);
      it = next;
    }
    ready.swap(authenticated_);
  }
  for (auto& h : finished) h.thread.join();  // each has returned or is about to
  return ready;
}

void StoreHandshakes::stop() {
  std::list<Handshake> all;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    // Shutting down (not closing) the socket makes a blocked handshake fail at once while
    // its thread still owns the descriptor.
    for (auto& h : running_)
      if (!h.done) ::shutdown(h.fd, SHUT_RDWR);
    all.splice(all.end(), running_);
    authenticated_.clear();
  }
  for (auto& h : all) h.thread.join();
}

}  // namespace plait
