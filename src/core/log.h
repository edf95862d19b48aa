// Diagnostics on stderr, one line each: "plait[rank 3] info: ...". The level comes from
// PLAIT_LOG (error|warn|info|debug, default warn) read once per process: logging is
// process-wide by nature. Log once, where an error is first seen (docs/logging.md).
#pragma once

#include <sstream>
#include <string>

namespace plait {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

bool log_enabled(LogLevel level);
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
