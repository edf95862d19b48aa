// Diagnostics on stderr, one line each: "plait[rank 3] info: ...". The level comes from
// PLAIT_LOG (error|warn|info|debug, default warn) read once per process: logging is
// process-wide by nature. Log once, where an error is first seen (docs/logging.md).
#pragma once

#include <atomic>
#include <sstream>
#include <string>

namespace plait {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

namespace log_detail {
// The level once PLAIT_LOG has been read, -1 before; read on every call's path, so inline.
extern std::atomic<int> level_cache;
LogLevel read_level();
}  // namespace log_detail

inline bool log_enabled(LogLevel level) {
  int current = log_detail::level_cache.load(std::memory_order_relaxed);
  if (current < 0) [[unlikely]]
    current = static_cast<int>(log_detail::read_level());
  return static_cast<int>(level) <= current;
}
void log_line(LogLevel level, const std::string& text);
// The rank shown in the prefix; set once the process knows it.
void set_log_rank(int rank);

// log(LogLevel::kInfo, "allreduce: ", algo, " chosen, cost ", us, " us");
template <typename... Args>
void log(LogLevel level, const Args&... args) {
  if (!log_enabled(level)) return;
  std::ostringstream out;
  (out << ... << args);
  log_line(level, out.str());
}

}  // namespace plait
