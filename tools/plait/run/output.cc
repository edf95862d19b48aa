#include "plait/run/output.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace plait::cli {

void LinePrefixer::feed(std::string_view data) {
  std::string batch;
  while (!data.empty()) {
    size_t newline = data.find_first_of("\r\n");
    // A line ending in a lone '\r' redraws itself (a progress display): it goes out at once,
    // prefixed, and the terminal's next line overwrites it. "\r\n" ends a line as '\n' does.
    if (newline != std::string_view::npos && data[newline] == '\r' && newline + 1 < data.size() &&
        data[newline + 1] == '\n')
      ++newline;
    if (newline == std::string_view::npos) {
      pending_.append(data);
      size_t cut = 0;
      for (; pending_.size() - cut >= kMaxLine; cut += kMaxLine) {
        batch += prefix_;
        batch.append(pending_, cut, kMaxLine);
        batch += '\n';
      }
      pending_.erase(0, cut);
      break;
    }
    batch += prefix_;
    batch += pending_;
    batch.append(data.substr(0, newline + 1));
    pending_.clear();
    data.remove_prefix(newline + 1);
  }
  if (!batch.empty()) write_all_or_drop(out_fd_, batch);
}

void LinePrefixer::finish() {
  if (pending_.empty()) return;
  write_all_or_drop(out_fd_, prefix_ + pending_ + '\n');
  pending_.clear();
}

void write_all_or_drop(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n > 0) {
      text.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Someone made our stdout non-blocking; waiting here keeps the line whole.
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else {
      return;
    }
  }
}

}  // namespace plait::cli
