// The embedded TCP store server's insides (wire format in store_protocol.h), shared by its two
// halves: tcp_store_server.cc (the event loop: accepting, reading frames, writing replies,
// closing) and tcp_store_requests.cc (what a request does to the data, and the GET/WAIT
// requests parked until they can be answered).
//
// One event-loop thread owns every key and every authenticated connection, so the data needs
// no lock and a GET/WAIT that cannot be answered yet is simply parked until a SET or ADD makes
// it answerable, or its deadline passes. Connections reach the loop once they have proved the
// job token (store_handshakes.h).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/store_handshakes.h"
#include "bootstrap/store_protocol.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/socket.h"
#include "plait/store.h"

namespace plait {

namespace store_server {

// A GET or WAIT the server cannot answer yet.
struct Parked {
  store_wire::Op op;
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

}  // namespace store_server

struct TcpStoreServer::Impl {
  using Conn = store_server::Conn;
  using Op = store_wire::Op;
  using Status = store_wire::Status;

  Impl(const std::string& host, int port, std::string job_token, int max_handshakes);
  ~Impl();

  // The loop thread only (tcp_store_server.cc).
  void wake_loop();
  void loop();
  void accept_ready();
  void adopt_authenticated();
  void update_listener();
  void on_readable(Conn& c);
  void flush(Conn& c);
  void serve(Conn& c);
  void refuse_frame(Conn& c, uint32_t length);
  void reply(Conn& c, Bytes frame);
  void pause_accepting(int err);
  // Marks a connection for closing; quiet for ordinary disconnects, a warning for clients
  // that break the protocol.
  void drop(Conn& c, LogLevel level, const std::string& why);
  void close_dead();
  void set_events(Conn& c, bool want_write);

  // The loop thread only (tcp_store_requests.cc).
  // A request decoded by serve() (store_wire::decode_request).
  void execute(Conn& c, store_wire::Request q);
  void reply_status(Conn& c, Status status, const std::vector<std::string>& missing_keys = {},
                    const std::string& error = {});
  void answer_or_park(Conn& c, Op op, std::vector<std::string> keys, uint64_t timeout_ms);
  void answer_ready(Conn& c, Op op, const std::vector<std::string>& keys);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  void unpark(int fd, Conn& c);
  void key_changed(const std::string& key);
  void expire_parked();
  void run_unparked();

  const std::string token;
  net::Fd listener;
  const int port;
  const std::string address;  // "host:port", for logs
  StoreHandshakes handshakes;
  net::Fd epoll;
  net::Fd wake;
  std::atomic<bool> stopping{false};
  std::thread loop_thread;

  // Whether the listener is in the epoll set: not while out of descriptors (until
  // accept_paused_until) nor while `handshakes` is full.
  bool listening = false;
  std::optional<Clock::time_point> accept_paused_until;
  bool told_handshake_limit = false;  // the limit is explained once, then logged quietly

  std::map<std::string, Bytes> data;
  std::map<int, Conn> conns;
  std::map<std::string, std::set<int>> waiting_on;  // key -> connections parked on it
  std::set<std::pair<Clock::time_point, int>> deadlines;
  std::vector<int> unparked;  // may hold further pipelined requests to serve
  std::vector<int> dying;     // connections marked dead
};

}  // namespace plait
