#include "plait/error.h"

#include <cstring>
#include <sstream>

namespace plait {

std::string_view to_string(ErrorCategory category) {
  switch (category) {
    case ErrorCategory::kInvalidUsage: return "invalid usage";
    case ErrorCategory::kTimeout: return "timeout";
    case ErrorCategory::kRemote: return "remote";
    case ErrorCategory::kSystem: return "system";
    case ErrorCategory::kAborted: return "aborted";
  }
  return "unknown";
}

namespace {

std::string format(ErrorCategory category, const std::string& message, const ErrorContext& c) {
  std::ostringstream out;
  bool any = false;
  if (c.rank >= 0) {
    out << "rank " << c.rank;
    any = true;
  }
  if (!c.op.empty()) {
    out << (any ? ": " : "") << c.op;
    if (c.seq >= 0) out << " #" << c.seq;
    any = true;
  }
  if (c.peer >= 0) {
    out << (any ? " " : "") << "with peer " << c.peer;
    any = true;
  }
  if (c.bytes >= 0) {
    out << (any ? " " : "") << "(" << c.bytes << " bytes)";
    any = true;
  }
  out << (any ? ": " : "") << message << " [" << to_string(category) << "]";
  return out.str();
}

}  // namespace

Error::Error(ErrorCategory category, std::string message, ErrorContext context)
    : std::runtime_error(format(category, message, context)),
      category_(category),
      message_(std::move(message)),
      context_(std::move(context)) {}

Error Error::with_context(const ErrorContext& outer) const {
  ErrorContext c = context_;
  if (c.rank < 0) c.rank = outer.rank;
  if (c.peer < 0) c.peer = outer.peer;
  if (c.op.empty()) c.op = outer.op;
  if (c.seq < 0) c.seq = outer.seq;
  if (c.bytes < 0) c.bytes = outer.bytes;
  return Error(category_, message_, std::move(c));
}

Error invalid_usage(std::string message, ErrorContext context) {
  return Error(ErrorCategory::kInvalidUsage, std::move(message), std::move(context));
}
Error timeout_error(std::string message, ErrorContext context) {
  return Error(ErrorCategory::kTimeout, std::move(message), std::move(context));
}
Error remote_error(std::string message, ErrorContext context) {
  return Error(ErrorCategory::kRemote, std::move(message), std::move(context));
}
Error system_error(std::string message, int err, ErrorContext context) {
  char buf[256];
  const char* text = strerror_r(err, buf, sizeof buf);
  return Error(ErrorCategory::kSystem, message + ": " + text, std::move(context));
}
Error aborted_error(std::string message, ErrorContext context) {
  return Error(ErrorCategory::kAborted, std::move(message), std::move(context));
}

}  // namespace plait
