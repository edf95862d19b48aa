// The embedded TCP store server's event loop: accepting (no faster than handshakes finish),
// reading frames, writing replies, closing. What requests do is in tcp_store_requests.cc;
// the design is at the top of tcp_store_server_impl.h.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "bootstrap/tcp_store_server_impl.h"
#include "core/config.h"
#include "plait/error.h"

namespace plait {
namespace {

using namespace store_wire;

// The loop wakes at least this often even with nothing to do, so no wait is unbounded.
constexpr int kMaxIdleMs = 1000;
// Out of file descriptors, the level-triggered listener would spin; accepting pauses instead.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
// What one connection may have received and not yet served: a whole frame of the largest
// size plus one read. More means a client that keeps sending while its request is parked.
constexpr size_t kReadChunk = 65536;
constexpr size_t kMaxBufferedBytes = kFrameHeaderBytes + kMaxFrameBytes + kReadChunk;

std::string endpoint(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

// 0 means PLAIT_STORE_MAX_HANDSHAKES, read (and checked) by the config registry.
int handshake_limit(int requested) {
  if (requested < 0)
    throw invalid_usage("store server: at most " + std::to_string(requested) +
                            " handshakes at once makes no sense; pass 0 for "
                            "PLAIT_STORE_MAX_HANDSHAKES or a positive number",
                        {.op = "store serve"});
  if (requested > 0) return requested;
  std::map<std::string, std::string> env;
  if (const char* value = std::getenv("PLAIT_STORE_MAX_HANDSHAKES"))
    env["PLAIT_STORE_MAX_HANDSHAKES"] = value;
  return Config::from_env(env).store_max_handshakes;
}

}  // namespace

TcpStoreServer::Impl::Impl(const std::string& host, int port_in, std::string job_token,
                           int max_handshakes)
    : token(std::move(job_token)),
      listener(net::listen_tcp(host, port_in)),
      port(net::local_port(listener.get())),
      address(endpoint(host, port)),
      handshakes(token, handshake_limit(max_handshakes), address, [this] { wake_loop(); }) {
  net::set_nonblocking(listener.get());
  epoll = net::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid())
    throw system_error("store server: epoll_create1", errno, {.op = "store serve"});
  wake = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) throw system_error("store server: eventfd", errno, {.op = "store serve"});
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake.get();
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev) != 0)
    throw system_error("store server: epoll_ctl", errno, {.op = "store serve"});
  update_listener();
  loop_thread = std::thread([this] { loop(); });
}

TcpStoreServer::Impl::~Impl() {
  stopping = true;
  wake_loop();
  if (loop_thread.joinable()) loop_thread.join();
  handshakes.stop();  // before `wake` closes: a finishing handshake still rings it
}

void TcpStoreServer::Impl::wake_loop() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake.get(), &one, sizeof one);
}

void TcpStoreServer::Impl::loop() {
  try {
    epoll_event events[64];
    while (!stopping) {
      int timeout_ms = kMaxIdleMs;
      if (!deadlines.empty())
        timeout_ms = std::min(timeout_ms, Deadline(deadlines.begin()->first).remaining_ms());
      if (accept_paused_until)
        timeout_ms = std::min(timeout_ms, Deadline(*accept_paused_until).remaining_ms());
      int n = ::epoll_wait(epoll.get(), events, 64, timeout_ms);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw system_error("epoll_wait", errno);
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == listener.get()) {
          accept_ready();
        } else if (fd == wake.get()) {
          uint64_t count;
          [[maybe_unused]] ssize_t r = ::read(wake.get(), &count, sizeof count);
          adopt_authenticated();
        } else if (auto it = conns.find(fd); it != conns.end()) {
          if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))
            on_readable(it->second);
          if (events[i].events & EPOLLOUT) flush(it->second);
        }
        run_unparked();
        close_dead();
      }
      expire_parked();
      run_unparked();
      close_dead();
      if (accept_paused_until && Clock::now() >= *accept_paused_until) {
        accept_paused_until.reset();
        update_listener();
      }
    }
  } catch (const std::exception& e) {
    log(LogLevel::kError, "store server on ", address, " stopped: ", e.what());
  }
  // Closing every socket now, not at destruction, turns clients' waits into prompt errors.
  conns.clear();
  listener.reset();
}

void TcpStoreServer::Impl::accept_ready() {
  while (!handshakes.full()) {
    int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      handshakes.start(net::Fd(fd));
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      pause_accepting(errno);
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      log(LogLevel::kWarn, "store server on ", address, ": accept: ", std::strerror(errno));
    }
    return;
  }
  // Full: the others wait in the listen queue until a handshake finishes. A client that
  // holds its slot until the handshake times out is logged by name when it does.
  const LogLevel level = told_handshake_limit ? LogLevel::kDebug : LogLevel::kInfo;
  told_handshake_limit = true;
  log(level, "store server on ", address, ": ", handshakes.limit(),
      " connections are proving the job token at once (PLAIT_STORE_MAX_HANDSHAKES); further "
      "clients wait in the listen queue until one finishes or gives up after 30 s");
  update_listener();
}

// Waiting clients stay in the listen backlog (their connect timeout still runs) until a
// descriptor frees up.
void TcpStoreServer::Impl::pause_accepting(int err) {
  log(LogLevel::kWarn, "store server on ", address, ": cannot accept more clients (",
      std::strerror(err), "); with this many ranks, raise the open-file limit (ulimit -n)");
  accept_paused_until = Clock::now() + kAcceptPause;
  update_listener();
}

void TcpStoreServer::Impl::update_listener() {
  const bool want = !accept_paused_until && !handshakes.full();
  if (want == listening) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listener.get();
  if (::epoll_ctl(epoll.get(), want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, listener.get(), &ev) != 0)
    throw system_error("epoll_ctl on the listening socket", errno);
  listening = want;
}

// A handshake finished: its connection joins the loop if it proved the token, and its slot
// may let the listener back in.
void TcpStoreServer::Impl::adopt_authenticated() {
  std::vector<net::Fd> ready = handshakes.take_authenticated();
  update_listener();
  for (auto& fd : ready) {
    int raw = fd.get();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = raw;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, raw, &ev) != 0) {
      log(LogLevel::kWarn, "store server on ", address, ": epoll_ctl: ", std::strerror(errno));
      continue;
    }
    Conn& c = conns[raw];
    c = Conn{};
    c.peer = net::peer_address(raw);
    c.fd = std::move(fd);
  }
}

void TcpStoreServer::Impl::on_readable(Conn& c) {
  uint8_t buf[kReadChunk];
  bool eof = false;
  for (;;) {
    // The frame in front is checked as soon as its header is in, so a length over the limit
    // is refused before its body is buffered.
    if (c.in.size() >= kFrameHeaderBytes && read_frame_length(c.in.data()) > kMaxFrameBytes)
      return refuse_frame(c, read_frame_length(c.in.data()));
    if (c.in.size() > kMaxBufferedBytes) {
      return drop(c, LogLevel::kWarn,
                  "sent " + std::to_string(c.in.size()) +
                      " bytes ahead of the server, over the limit of " +
                      std::to_string(kMaxBufferedBytes) + " (one maximal frame and a read)");
    }
    ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      c.in.insert(c.in.end(), buf, buf + n);
      continue;
    }
    if (n == 0) {
      eof = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) drop(c, LogLevel::kInfo, std::strerror(errno));
    break;
  }
  serve(c);  // requests sent just before a close still count
  if (eof) drop(c, LogLevel::kDebug, "closed the connection");
}

void TcpStoreServer::Impl::serve(Conn& c) {
  size_t off = 0;
  while (!c.parked && !c.dead && c.in.size() - off >= kFrameHeaderBytes) {
    uint32_t len = read_frame_length(c.in.data() + off);
    if (len > kMaxFrameBytes) {
      refuse_frame(c, len);
      break;
    }
    if (c.in.size() - off - kFrameHeaderBytes < len) break;
    const uint8_t* body = c.in.data() + off + kFrameHeaderBytes;
    off += kFrameHeaderBytes + len;
    try {
      execute(c, decode_request(body, len));
    } catch (const Error& e) {
      drop(c, LogLevel::kWarn, e.message());
    }
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(off));
}

// The peer hears why before the connection closes: nothing after a frame that cannot be
// read could be parsed in step, and nothing is allocated for it. (Best effort: if the peer has
// sent more, closing with its bytes unread resets the connection and may lose the reply.)
void TcpStoreServer::Impl::refuse_frame(Conn& c, uint32_t length) {
  const std::string why = "a frame of " + std::to_string(length) + " bytes is over the limit of " +
                          std::to_string(kMaxFrameBytes) + " bytes";
  reply_status(c, Status::kError, {}, why + "; closing the connection");
  drop(c, LogLevel::kWarn, "sent " + why);
}

void TcpStoreServer::Impl::reply(Conn& c, Bytes frame) {
  if (c.out_sent == c.out.size()) {
    c.out = std::move(frame);
    c.out_sent = 0;
  } else {
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  }
  flush(c);
}

void TcpStoreServer::Impl::flush(Conn& c) {
  while (!c.dead && c.out_sent < c.out.size()) {
    ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                       MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      c.out_sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      drop(c, LogLevel::kInfo, std::strerror(errno));
    }
  }
  if (c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
  }
  if (!c.dead) set_events(c, !c.out.empty());
}

void TcpStoreServer::Impl::set_events(Conn& c, bool want_write) {
  if (c.want_write == want_write) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (want_write ? EPOLLOUT : 0u);
  ev.data.fd = c.fd.get();
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) != 0) {
    drop(c, LogLevel::kWarn, std::string("epoll_ctl: ") + std::strerror(errno));
    return;
  }
  c.want_write = want_write;
}

void TcpStoreServer::Impl::drop(Conn& c, LogLevel level, const std::string& why) {
  if (c.dead) return;
  c.dead = true;
  dying.push_back(c.fd.get());
  log(level, "store server on ", address, ": client ", c.peer, ": ", why);
}

void TcpStoreServer::Impl::close_dead() {
  for (int fd : dying) {
    auto it = conns.find(fd);
    if (it == conns.end()) continue;
    unpark(fd, it->second);
    conns.erase(it);  // closing the fd also removes it from the epoll set
  }
  dying.clear();
}

TcpStoreServer::TcpStoreServer(const std::string& host, int port, std::string job_token,
                               int max_handshakes)
    : impl_(std::make_unique<Impl>(host, port, std::move(job_token), max_handshakes)) {}

TcpStoreServer::~TcpStoreServer() = default;

int TcpStoreServer::port() const { return impl_->port; }

}  // namespace plait
