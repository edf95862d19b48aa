// The rank prefix on every output line: "[2] text".
//
// The launcher is one thread that writes only whole prefixed lines, each batch with one
// write loop, so lines of different ranks never mix mid-line. A line longer than the limit
// is cut (and the cut marked by a newline) rather than buffered without bound.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace plait::cli {

class LinePrefixer {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  LinePrefixer(std::string prefix, int out_fd) : prefix_(std::move(prefix)), out_fd_(out_fd) {}

  // Writes every line `data` completes ('\n', or a lone '\r': a line redrawn in place);
  // keeps the unfinished rest for later.
  void feed(std::string_view data);
  // Writes the unfinished rest, if any, as a line of its own (the stream ended without '\n').
  void finish();

 private:
  std::string prefix_;
  int out_fd_;
  std::string pending_;
};

// Writes all of `text`, waiting while the descriptor is full. Output the reader no longer
// wants (EPIPE, a closed terminal) is dropped: the job must go on, and its ranks be reaped.
void write_all_or_drop(int fd, std::string_view text);

}  // namespace plait::cli
