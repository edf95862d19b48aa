#include "core/process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/socket.h"

namespace plait {

bool process_gone(pid_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

bool process_stopped(pid_t pid) {
  if (pid <= 0) return false;
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  net::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  char buf[512];
  ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return false;
  buf[n] = '\0';
  // "pid (comm) S ...": the name may hold spaces and parentheses; the state follows the last ')'.
  const char* close = std::strrchr(buf, ')');
  if (!close || close[1] != ' ') return false;
  return close[2] == 'T' || close[2] == 't';
}

}  // namespace plait
