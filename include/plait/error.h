// plait's one error type. Every failure that crosses an API boundary is a plait::Error:
// thrown by blocking calls and Work::wait(), carried by value in transport completions.
// It has a category (what kind of failure, so callers can branch) and a context (who and
// what: rank, peer, operation, sequence number, bytes), and its what() reads like
//   "rank 2: allreduce #41 with peer 3 (4194304 bytes): connection reset by peer [remote]".
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace plait {

enum class ErrorCategory : uint8_t {
  kInvalidUsage,  // the caller broke a contract: bad argument, mismatched collective, bad key
  kTimeout,       // a wait ran out of time; the operation may still be pending remotely
  kRemote,        // a peer failed: died, closed its connection, or reported an error
  kSystem,        // the OS refused: socket, mmap, file errors (errno text in the message)
  kAborted,       // the communicator or fabric was aborted, locally or by a peer
};

std::string_view to_string(ErrorCategory category);

// Who and what an error is about. Unset fields (-1 / empty) are left out of what().
struct ErrorContext {
  int rank = -1;
  int peer = -1;
  std::string op;     // "allreduce", "tcp connect", "store get", ...
  int64_t seq = -1;   // operation sequence number on its communicator
  int64_t bytes = -1;
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, std::string message, ErrorContext context = {});

  ErrorCategory category() const noexcept { return category_; }
  const ErrorContext& context() const noexcept { return context_; }
  // The bare cause, without the context prefix.
  const std::string& message() const noexcept { return message_; }

  // Fills context fields that are still unset; used as an error travels up the layers.
  Error with_context(const ErrorContext& outer) const;

 private:
  ErrorCategory category_;
  std::string message_;
  ErrorContext context_;
};

// Convenience constructors; `errno`-style system errors append strerror(err).
Error invalid_usage(std::string message, ErrorContext context = {});
Error timeout_error(std::string message, ErrorContext context = {});
Error remote_error(std::string message, ErrorContext context = {});
Error system_error(std::string message, int err, ErrorContext context = {});
Error aborted_error(std::string message, ErrorContext context = {});

}  // namespace plait
