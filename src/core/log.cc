// The process-wide logger. Two pieces of global state, both deliberate: the level (PLAIT_LOG,
// read once, because the environment is per process too) and the rank shown in the prefix.
#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <mutex>

namespace plait {
namespace {

constexpr const char* kLevelNames[] = {"error", "warn", "info", "debug"};

std::once_flag level_once;
LogLevel level_from_env = LogLevel::kWarn;  // written only inside call_once
std::atomic<int> log_rank{-1};

// One write(2) per line: stderr is unbuffered and shared by every thread (and, under a
// launcher, by every rank on the host), and a single write of a line is not interleaved with
// another. Only a short write (a full pipe interrupted by a signal) continues in a second call.
void emit(LogLevel level, const std::string& text) {
  std::string line = "plait";
  if (int rank = log_rank.load(std::memory_order_relaxed); rank >= 0) {
    line += "[rank " + std::to_string(rank) + "]";
  }
  line += " ";
  line += kLevelNames[static_cast<int>(level)];
  line += ": ";
  line += text;
  if (line.empty() || line.back() != '\n') line += '\n';
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere left to report a logging failure
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void read_level_from_env() {
  const char* raw = std::getenv("PLAIT_LOG");
  std::string value = raw == nullptr ? "" : raw;
  std::string word;
  for (char c : value) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  if (word.empty()) return;
  for (int i = 0; i < 4; ++i) {
    if (word == kLevelNames[i]) {
      level_from_env = static_cast<LogLevel>(i);
      return;
    }
  }
  // emit(), not log(): log() would re-enter this call_once.
  emit(LogLevel::kWarn,
       "PLAIT_LOG='" + value + "' is not one of error|warn|info|debug; using warn");
}


}  // namespace

namespace log_detail {

// Read on every log() call, including the per-call path's lines: a relaxed load once the
// environment has been read, not a call_once.
std::atomic<int> level_cache{-1};

LogLevel read_level() {
  std::call_once(level_once, read_level_from_env);
  level_cache.store(static_cast<int>(level_from_env), std::memory_order_relaxed);
  return level_from_env;
}

}  // namespace log_detail

void log_line(LogLevel level, const std::string& text) {
  if (static_cast<int>(level) < 0 || static_cast<int>(level) > 3) level = LogLevel::kError;
  if (!log_enabled(level)) return;
  emit(level, text);
}

void set_log_rank(int rank) { log_rank.store(rank < 0 ? -1 : rank, std::memory_order_relaxed); }

}  // namespace plait
