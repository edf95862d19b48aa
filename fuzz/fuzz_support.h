// Helpers shared by the fuzz targets (docs/fuzzing.md).
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/socket.h"

namespace plait::fuzz {

// A broken invariant: abort, so that libFuzzer saves the input and the replay test fails
// (assert() would vanish from the Release replay build).
#define PLAIT_FUZZ_CHECK(cond)                                                        \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                            \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

// Logging costs a formatted line per rejected input: keep the log to errors. Set before the
// first log line (the level is read once per process); PLAIT_LOG from outside still wins.
inline void quiet_logs() { ::setenv("PLAIT_LOG", "error", 0); }

// A connected pair of stream sockets: `ours` goes to the code under test, `theirs` plays
// the peer.
struct SocketPair {
  net::Fd ours;
  net::Fd theirs;
};

inline SocketPair socket_pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    std::perror("socketpair");
    std::abort();
  }
  return {net::Fd(fds[0]), net::Fd(fds[1])};
}

// The peer sends `data` and then closes its sending side: the code under test reads the
// input, then EOF, so no input can make it wait for more. Only for inputs that fit the
// socket buffer (callers bound them): the write must not block with nobody reading.
inline void send_then_eof(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) {
      std::perror("send to the code under test");
      std::abort();
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
}

}  // namespace plait::fuzz
