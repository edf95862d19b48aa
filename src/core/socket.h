// Blocking TCP helpers shared by the store and the TCP provider's connection setup. Every
// call that can wait takes a Deadline; failures throw plait::Error with the peer address and
// the OS error text.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "core/clock.h"

namespace plait::net {

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset();

 private:
  int fd_ = -1;
};

// Listens on host:port (port 0 = any free port). host "" or "0.0.0.0" means every address.
Fd listen_tcp(const std::string& host, int port, int backlog = 512);
// Bound with SO_REUSEADDR but not listening: holds a port (port 0 picks one) that another
// process may still bind and listen on with SO_REUSEADDR (torch's TCPStore does), while
// bind(port 0) elsewhere on the machine passes it over.
Fd bind_tcp(const std::string& host, int port);
int local_port(int fd);
// Accepts one connection, waiting at most until the deadline; returns an invalid Fd on timeout.
Fd accept_tcp(int listen_fd, const Deadline& deadline);
// Connects, retrying while the server is not up yet (refused/unreachable) until the deadline.
Fd connect_tcp(const std::string& host, int port, const Deadline& deadline);

// Blocking full transfers with a deadline (the fd may be blocking or not). recv_all throws
// kRemote "connection closed by peer" on EOF.
void send_all(int fd, const void* data, size_t len, const Deadline& deadline);
void recv_all(int fd, void* data, size_t len, const Deadline& deadline);

// "10.0.0.2:41234" (IPv6 in brackets) of a connected socket's peer, for messages.
std::string peer_address(int fd);

void set_nodelay(int fd);
void set_nonblocking(int fd, bool on = true);
void set_buffer_sizes(int fd, int bytes);
// TCP_NOTSENT_LOWAT: the socket reports writable, and takes more, only while fewer than
// `bytes` of what was written are still unsent.
void set_notsent_lowat(int fd, size_t bytes);

// An address of this host that peers can connect to: PLAIT_TCP_IFNAME's (interface name or
// literal address) if set, else the address used to reach `toward_host` (e.g. the store's
// host), else 127.0.0.1 (a single-host job).
std::string local_address(const std::string& ifname_or_addr, const std::string& toward_host);

}  // namespace plait::net
