// The embedded store server's connections that are still proving the job token.
//
// The handshake is blocking by contract (core/auth.h), so each one runs on a short-lived
// thread of its own: a slow or hostile client then costs one sleeping thread, never the event
// loop's attention. Those threads are bounded: at most `limit` exist at once (a thread counts
// until it is joined), and while the set is full the server stops accepting, so further
// clients wait in the kernel's listen queue (their connect timeout still runs) instead of
// each costing a thread.
#pragma once

#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/socket.h"

namespace plait {

class StoreHandshakes {
 public:
  // `server` names the server in logs ("127.0.0.1:29500"); `on_done` runs on a handshake's
  // own thread once it has finished, successfully or not (the server wakes its loop).
  StoreHandshakes(std::string token, int limit, std::string server, std::function<void()> on_done);
  // stop()s.
  ~StoreHandshakes();
  StoreHandshakes(const StoreHandshakes&) = delete;
  StoreHandshakes& operator=(const StoreHandshakes&) = delete;

  // The name of every handshake thread (/proc/<pid>/task/<tid>/comm).
  static constexpr char kThreadName[] = "plait-store-hs";

  int limit() const { return limit_; }
  // True while `limit` threads exist; start() must not be called then.
  bool full() const;
  // Runs the handshake of a freshly accepted connection on a new thread. If no thread can be
  // started, logs why and closes the connection.
  void start(net::Fd fd);
  // Joins the threads that have finished and hands over the connections that proved the
  // token, to be served from now on.
  std::vector<net::Fd> take_authenticated();
  // Fails every handshake still running (their sockets are shut down), joins every thread
  // and refuses later ones. Idempotent.
  void stop();

 private:
  struct Handshake {
    std::thread thread;
    int fd = -1;  // owned by the thread: others may shut it down while !done, never close it
    bool done = false;
  };
  void run(Handshake& h);

  const std::string token_;
  const int limit_;
  const std::string server_;
  const std::function<void()> on_done_;

  mutable std::mutex mu_;
  std::list<Handshake> running_;        // a list: threads hold references to their entry
  std::vector<net::Fd> authenticated_;  // proved the token, not taken yet
  bool stopping_ = false;
};

}  // namespace plait
