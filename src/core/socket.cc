#include "core/socket.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <thread>

#include "plait/error.h"

namespace plait::net {

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

std::string endpoint(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  const char* node = (host.empty() || host == "0.0.0.0") && passive ? nullptr : host.c_str();
  int rc = ::getaddrinfo(node, service.c_str(), &hints, &res);
  if (rc != 0) {
    throw invalid_usage("cannot resolve " + endpoint(host, port) + ": " + gai_strerror(rc),
                        {.op = "resolve"});
  }
  return res;
}

}  // namespace

Fd listen_tcp(const std::string& host, int port, int backlog) {
  Fd fd = bind_tcp(host, port);
  if (::listen(fd.get(), backlog) != 0)
    throw system_error("cannot listen on " + endpoint(host, port), errno, {.op = "listen"});
  return fd;
}

Fd bind_tcp(const std::string& host, int port) {
  addrinfo* res = resolve(host, port, true);
  int last_err = 0;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last_err = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    last_err = errno;
  }
  ::freeaddrinfo(res);
  throw system_error("cannot bind " + endpoint(host, port), last_err, {.op = "bind"});
}

int local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    throw system_error("getsockname", errno);
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

Fd accept_tcp(int listen_fd, const Deadline& deadline) {
  for (;;) {
    pollfd p{listen_fd, POLLIN, 0};
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) throw system_error("poll on listening socket", errno, {.op = "accept"});
    if (rc == 0) return Fd();
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return Fd(fd);
    if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
    throw system_error("accept", errno, {.op = "accept"});
  }
}

Fd connect_tcp(const std::string& host, int port, const Deadline& deadline) {
  int last_err = ETIMEDOUT;
  auto backoff = std::chrono::milliseconds(5);
  do {
    addrinfo* res = resolve(host, port, false);
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
      if (!fd.valid()) {
        last_err = errno;
        continue;
      }
      set_nonblocking(fd.get(), true);
      int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        rc = ::poll(&p, 1, deadline.remaining_ms());
        if (rc == 1) {
          int err = 0;
          socklen_t len = sizeof err;
          ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err == 0 ? 0 : -1;
          errno = err;
        } else {
          rc = -1;
          errno = ETIMEDOUT;
        }
      }
      if (rc == 0) {
        ::freeaddrinfo(res);
        set_nonblocking(fd.get(), false);
        set_nodelay(fd.get());
        return fd;
      }
      last_err = errno;
    }
    ::freeaddrinfo(res);
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(backoff, deadline.remaining()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  } while (!deadline.expired());
  throw timeout_error("cannot connect to " + endpoint(host, port) + ": " + strerror(last_err),
                      {.op = "connect"});
}

void send_all(int fd, const void* data, size_t len, const Deadline& deadline) {
  auto* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      int rc = ::poll(&pf, 1, deadline.remaining_ms());
      if (rc == 0) throw timeout_error("send timed out with " + std::to_string(len) + " bytes left");
      continue;
    }
    throw remote_error(std::string("send failed: ") + strerror(errno));
  }
}

void recv_all(int fd, void* data, size_t len, const Deadline& deadline) {
  auto* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throw remote_error("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd pf{fd, POLLIN, 0};
      int rc = ::poll(&pf, 1, deadline.remaining_ms());
      if (rc == 0) throw timeout_error("receive timed out with " + std::to_string(len) + " bytes left");
      continue;
    }
    throw remote_error(std::string("receive failed: ") + strerror(errno));
  }
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    std::string text = "[";  // appended piecewise: GCC 12 warns falsely on "[" + string
    text.append(host).append("]:").append(std::to_string(ntohs(in6->sin6_port)));
    return text;
  }
  return "unknown peer";
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_nonblocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void set_notsent_lowat(int fd, size_t bytes) {
  const int value = static_cast<int>(std::min<size_t>(bytes, INT_MAX));
  ::setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &value, sizeof value);
}

void set_buffer_sizes(int fd, int bytes) {
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

namespace {

std::string numeric_host(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  else
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  return buf;
}

}  // namespace

std::string local_address(const std::string& ifname_or_addr, const std::string& toward_host) {
  if (!ifname_or_addr.empty()) {
    ifaddrs* ifs = nullptr;
    if (::getifaddrs(&ifs) == 0) {
      for (ifaddrs* i = ifs; i; i = i->ifa_next) {
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && ifname_or_addr == i->ifa_name) {
          std::string a = numeric_host(i->ifa_addr);
          ::freeifaddrs(ifs);
          return a;
        }
      }
      ::freeifaddrs(ifs);
    }
    return ifname_or_addr;  // a literal address
  }
  if (!toward_host.empty()) {
    // A UDP "connect" sends nothing but makes the kernel pick the route's source address.
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    if (::getaddrinfo(toward_host.c_str(), "9", &hints, &res) == 0 && res) {
      Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      if (fd.valid() && ::connect(fd.get(), res->ai_addr, res->ai_addrlen) == 0) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
          ::freeaddrinfo(res);
          return numeric_host(reinterpret_cast<sockaddr*>(&ss));
        }
      }
      ::freeaddrinfo(res);
    }
  }
  return "127.0.0.1";
}

}  // namespace plait::net
