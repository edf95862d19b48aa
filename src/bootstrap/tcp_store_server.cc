// The embedded TCP store server (wire format in store_protocol.h).
//
// One event-loop thread (epoll) owns every key and every authenticated connection, so the
// data needs no lock and a GET/WAIT that cannot be answered yet is simply parked until a SET
// or ADD makes it answerable, or its deadline passes. The job-token handshake is blocking by
// contract (core/auth.h), so each new connection runs it on a short-lived thread of its own:
// a slow or hostile client then costs one sleeping thread, never the loop's attention.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "bootstrap/store_protocol.h"
#include "core/auth.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/socket.h"
#include "plait/error.h"
#include "plait/store.h"

namespace plait {
namespace {

using namespace store_wire;

// Long enough for a loaded host, short enough that a silent client's thread goes away.
constexpr auto kHandshakeTimeout = std::chrono::seconds(30);
// Caps a client's timeout so deadline arithmetic cannot overflow.
constexpr auto kMaxRequestWait = std::chrono::hours(24 * 365);
// The loop wakes at least this often even with nothing to do, so no wait is unbounded.
constexpr int kMaxIdleMs = 1000;
// Out of file descriptors, the level-triggered listener would spin; accepting pauses instead.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

// A GET or WAIT the server cannot answer yet.
struct Parked {
  Op op;
  std::vector<std::string> keys;
  Clock::time_point deadline;
};

struct Conn {
  net::Fd fd;
  std::string peer;
  Bytes in;   // received bytes not yet parsed
  Bytes out;  // reply bytes not yet sent
  size_t out_sent = 0;
  bool want_write = false;  // EPOLLOUT is registered
  std::optional<Parked> parked;
  bool dead = false;  // to be closed at the end of the loop iteration
};

}  // namespace

struct TcpStoreServer::Impl {
  Impl(const std::string& host, int port, std::string job_token);
  ~Impl();

  // One per connection still proving its token.
  struct Handshake {
    std::thread thread;
    int fd = -1;  // owned by the thread: others may shut it down while !done, never close it
    bool done = false;
  };

  // Handshake threads (and the loop, which starts them).
  void start_handshake(net::Fd fd);
  void run_handshake(Handshake& h);
  void wake_loop();

  // The loop thread only.
  void loop();
  void accept_ready();
  void adopt_authenticated();
  void reap_handshakes();
  void on_readable(Conn& c);
  void flush(Conn& c);
  void serve(Conn& c);
  void execute(Conn& c, Reader& r);
  void reply(Conn& c, Bytes frame);
  void reply_status(Conn& c, Status status, const std::vector<std::string>& missing_keys = {},
                    const std::string& error = {});
  void pause_accepting(int err);
  void resume_accepting();
  void answer_or_park(Conn& c, Op op, std::vector<std::string> keys, uint64_t timeout_ms);
  void answer_ready(Conn& c, Op op, const std::vector<std::string>& keys);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  void unpark(int fd, Conn& c);
  void key_changed(const std::string& key);
  void expire_parked();
  void run_unparked();
  // Marks a connection for closing; quiet for ordinary disconnects, a warning for clients
  // that break the protocol.
  void drop(Conn& c, LogLevel level, const std::string& why);
  void close_dead();
  void set_events(Conn& c, bool want_write);

  const std::string token;
  net::Fd listener;
  int port = 0;
  net::Fd epoll;
  net::Fd wake;
  std::atomic<bool> stopping{false};
  std::thread loop_thread;
  std::optional<Clock::time_point> accept_paused_until;

  std::mutex hs_mu;  // guards handshakes and authenticated, shared with handshake threads
  std::list<Handshake> handshakes;     // a list: threads hold references to their entry
  std::vector<net::Fd> authenticated;  // waiting for the loop to adopt them

  std::map<std::string, Bytes> data;
  std::map<int, Conn> conns;
  std::map<std::string, std::set<int>> waiting_on;  // key -> connections parked on it
  std::set<std::pair<Clock::time_point, int>> deadlines;
  std::vector<int> unparked;  // may hold further pipelined requests to serve
  std::vector<int> dying;     // connections marked dead
};

TcpStoreServer::Impl::Impl(const std::string& host, int port_in, std::string job_token)
    : token(std::move(job_token)) {
  listener = net::listen_tcp(host, port_in);
  net::set_nonblocking(listener.get());
  port = net::local_port(listener.get());
  epoll = net::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid())
    throw system_error("store server: epoll_create1", errno, {.op = "store serve"});
  wake = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) throw system_error("store server: eventfd", errno, {.op = "store serve"});
  for (int fd : {listener.get(), wake.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      throw system_error("store server: epoll_ctl", errno, {.op = "store serve"});
  }
  loop_thread = std::thread([this] { loop(); });
}

TcpStoreServer::Impl::~Impl() {
  stopping = true;
  wake_loop();
  if (loop_thread.joinable()) loop_thread.join();
  std::list<Handshake> pending;
  {
    std::lock_guard lock(hs_mu);
    // Shutting down (not closing) the socket makes a blocked handshake fail at once while
    // its thread still owns the descriptor.
    for (auto& h : handshakes)
      if (!h.done) ::shutdown(h.fd, SHUT_RDWR);
    pending.splice(pending.end(), handshakes);
  }
  for (auto& h : pending) h.thread.join();
}

void TcpStoreServer::Impl::wake_loop() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake.get(), &one, sizeof one);
}

void TcpStoreServer::Impl::start_handshake(net::Fd fd) {
  std::lock_guard lock(hs_mu);
  Handshake& h = handshakes.emplace_back();
  h.fd = fd.get();
  try {
    h.thread = std::thread([this, &h] { run_handshake(h); });
  } catch (const std::system_error& e) {
    handshakes.pop_back();
    log(LogLevel::kWarn, "store server on port ", port, ": cannot start a handshake thread (",
        e.what(), "); dropping the connection from ", net::peer_address(fd.get()));
    return;  // fd closes here
  }
  fd.release();
}

void TcpStoreServer::Impl::run_handshake(Handshake& h) {
  {
    // The descriptor becomes this thread's once start_handshake has returned; taking the
    // lock waits for that.
    std::lock_guard lock(hs_mu);
  }
  net::Fd fd(h.fd);
  std::string error;
  // Nobody else sees a refused client, so the server says why it closed the door; a peer
  // that merely hung up (a port probe, a rank that died) is not worth a warning.
  LogLevel level = LogLevel::kWarn;
  try {
    net::set_nodelay(fd.get());
    auth::accept_handshake(fd.get(), token, kAuthLabel, Deadline::after(kHandshakeTimeout));
  } catch (const Error& e) {
    error = e.what();
    if (e.category() == ErrorCategory::kRemote) level = LogLevel::kInfo;
  } catch (const std::exception& e) {
    error = e.what();
  }
  bool stopped;
  {
    std::lock_guard lock(hs_mu);
    h.done = true;
    stopped = stopping;
    if (error.empty() && !stopped) authenticated.push_back(std::move(fd));
  }
  if (!error.empty() && !stopped) log(level, "store server on port ", port, ": ", error);
  wake_loop();
}

void TcpStoreServer::Impl::reap_handshakes() {
  std::list<Handshake> finished;
  {
    std::lock_guard lock(hs_mu);
    for (auto it = handshakes.begin(); it != handshakes.end();) {
      auto next = std::next(it);
      if (it->done) finished.splice(finished.end(), handshakes, it);
      it = next;
    }
  }
  for (auto& h : finished) h.thread.join();  // each has returned or is about to
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
          reap_handshakes();
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
      if (accept_paused_until && Clock::now() >= *accept_paused_until) resume_accepting();
    }
  } catch (const std::exception& e) {
    log(LogLevel::kError, "store server on port ", port, " stopped: ", e.what());
  }
  // Closing every socket now, not at destruction, turns clients' waits into prompt errors.
  conns.clear();
  listener.reset();
}

void TcpStoreServer::Impl::accept_ready() {
  for (;;) {
    int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      start_handshake(net::Fd(fd));
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      pause_accepting(errno);
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      log(LogLevel::kWarn, "store server on port ", port, ": accept: ", std::strerror(errno));
    }
    return;
  }
}

// Waiting clients stay in the listen backlog (their connect timeout still runs) until a
// descriptor frees up.
void TcpStoreServer::Impl::pause_accepting(int err) {
  log(LogLevel::kWarn, "store server on port ", port, ": cannot accept more clients (",
      std::strerror(err), "); with this many ranks, raise the open-file limit (ulimit -n)");
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, listener.get(), nullptr) == 0)
    accept_paused_until = Clock::now() + kAcceptPause;
}

void TcpStoreServer::Impl::resume_accepting() {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listener.get();
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, listener.get(), &ev) != 0)
    throw system_error("epoll_ctl on the listening socket", errno);
  accept_paused_until.reset();
}

void TcpStoreServer::Impl::adopt_authenticated() {
  std::vector<net::Fd> ready;
  {
    std::lock_guard lock(hs_mu);
    ready.swap(authenticated);
  }
  for (auto& fd : ready) {
    int raw = fd.get();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = raw;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, raw, &ev) != 0) {
      log(LogLevel::kWarn, "store server on port ", port, ": epoll_ctl: ", std::strerror(errno));
      continue;
    }
    Conn& c = conns[raw];
    c = Conn{};
    c.peer = net::peer_address(raw);
    c.fd = std::move(fd);
  }
}

void TcpStoreServer::Impl::on_readable(Conn& c) {
  uint8_t buf[65536];
  bool eof = false;
  for (;;) {
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
      drop(c, LogLevel::kWarn, "sent a frame of " + std::to_string(len) + " bytes, over the limit");
      break;
    }
    if (c.in.size() - off - kFrameHeaderBytes < len) break;
    Reader r(c.in.data() + off + kFrameHeaderBytes, len);
    off += kFrameHeaderBytes + len;
    try {
      execute(c, r);
    } catch (const Error& e) {
      drop(c, LogLevel::kWarn, e.message());
    }
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(off));
}

void TcpStoreServer::Impl::execute(Conn& c, Reader& r) {
  auto op = static_cast<Op>(r.u8());
  switch (op) {
    case Op::kSet: {
      std::string key = r.str();
      Bytes value = r.bytes();
      r.expect_end();
      data[key] = std::move(value);
      reply_status(c, Status::kOk);
      key_changed(key);
      return;
    }
    case Op::kGet: {
      uint64_t timeout_ms = r.u64();
      std::string key = r.str();
      r.expect_end();
      answer_or_park(c, op, {std::move(key)}, timeout_ms);
      return;
    }
    case Op::kAdd: {
      std::string key = r.str();
      int64_t delta = r.i64();
      r.expect_end();
      int64_t value = 0;
      if (auto it = data.find(key); it != data.end()) {
        std::optional<int64_t> old = parse_decimal(it->second);
        if (!old) {
          return reply_status(c, Status::kError, {},
                              "the value of key '" + key + "' is not a decimal integer");
        }
        value = *old;
      }
      if (__builtin_add_overflow(value, delta, &value)) {
        return reply_status(c, Status::kError, {},
                            "adding " + std::to_string(delta) + " to key '" + key + "' overflows");
      }
      std::string text = std::to_string(value);
      data[key] = Bytes(text.begin(), text.end());
      reply(c, Writer().u8(uint8_t(Status::kOk)).i64(value).finish());
      key_changed(key);
      return;
    }
    case Op::kWait: {
      uint64_t timeout_ms = r.u64();
      std::vector<std::string> keys = r.strings();
      r.expect_end();
      answer_or_park(c, op, std::move(keys), timeout_ms);
      return;
    }
    case Op::kCheck: {
      std::string key = r.str();
      r.expect_end();
      reply(c, Writer().u8(uint8_t(Status::kOk)).u8(data.count(key) ? 1 : 0).finish());
      return;
    }
  }
  throw invalid_usage("malformed store message: unknown op " + std::to_string(int(op)));
}

std::vector<std::string> TcpStoreServer::Impl::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!data.count(k)) out.push_back(k);
  return out;
}

void TcpStoreServer::Impl::answer_ready(Conn& c, Op op, const std::vector<std::string>& keys) {
  Writer w;
  w.u8(uint8_t(Status::kOk));
  if (op == Op::kGet) w.bytes(data.at(keys.front()));
  reply(c, w.finish());
}

void TcpStoreServer::Impl::answer_or_park(Conn& c, Op op, std::vector<std::string> keys,
                                          uint64_t timeout_ms) {
  std::vector<std::string> absent = missing(keys);
  if (absent.empty()) return answer_ready(c, op, keys);
  if (timeout_ms == 0) return reply_status(c, Status::kTimeout, absent);
  auto wait =
      std::min<std::chrono::milliseconds>(std::chrono::milliseconds(timeout_ms), kMaxRequestWait);
  int fd = c.fd.get();
  c.parked = Parked{op, std::move(keys), Clock::now() + wait};
  for (const auto& k : absent) waiting_on[k].insert(fd);
  deadlines.emplace(c.parked->deadline, fd);
}

void TcpStoreServer::Impl::unpark(int fd, Conn& c) {
  if (!c.parked) return;
  for (const auto& k : c.parked->keys) {
    auto it = waiting_on.find(k);
    if (it == waiting_on.end()) continue;
    it->second.erase(fd);
    if (it->second.empty()) waiting_on.erase(it);
  }
  deadlines.erase({c.parked->deadline, fd});
  c.parked.reset();
}

void TcpStoreServer::Impl::key_changed(const std::string& key) {
  auto it = waiting_on.find(key);
  if (it == waiting_on.end()) return;
  std::vector<int> fds(it->second.begin(), it->second.end());
  for (int fd : fds) {
    Conn& w = conns.at(fd);
    if (!w.parked || !missing(w.parked->keys).empty()) continue;
    Parked p = *w.parked;
    unpark(fd, w);
    unparked.push_back(fd);
    answer_ready(w, p.op, p.keys);
  }
}

void TcpStoreServer::Impl::expire_parked() {
  auto now = Clock::now();
  while (!deadlines.empty() && deadlines.begin()->first <= now) {
    int fd = deadlines.begin()->second;
    Conn& c = conns.at(fd);
    std::vector<std::string> absent = missing(c.parked->keys);
    unpark(fd, c);
    unparked.push_back(fd);
    reply_status(c, Status::kTimeout, absent);
  }
}

void TcpStoreServer::Impl::run_unparked() {
  while (!unparked.empty()) {
    std::vector<int> batch;
    batch.swap(unparked);
    for (int fd : batch) {
      auto it = conns.find(fd);
      if (it != conns.end()) serve(it->second);
    }
  }
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

// OK without a payload, TIMEOUT with the missing keys, or ERROR with a message.
void TcpStoreServer::Impl::reply_status(Conn& c, Status status,
                                        const std::vector<std::string>& missing_keys,
                                        const std::string& error) {
  Writer w;
  w.u8(uint8_t(status));
  if (status == Status::kTimeout) write_strings(w, missing_keys);
  if (status == Status::kError) w.str(error);
  reply(c, w.finish());
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
  log(level, "store server on port ", port, ": client ", c.peer, ": ", why);
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

TcpStoreServer::TcpStoreServer(const std::string& host, int port, std::string job_token)
    : impl_(std::make_unique<Impl>(host, port, std::move(job_token))) {}

TcpStoreServer::~TcpStoreServer() = default;

int TcpStoreServer::port() const { return impl_->port; }

}  // namespace plait
