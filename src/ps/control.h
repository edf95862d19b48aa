// Decoding of the parameter server's control messages (layout in wire.h), as the server's
// on_message() and the worker's on_control() take them: pure functions of a message's header
// word and bytes, so that both and the fuzz target (fuzz/ps_control_fuzz.cc) run the same
// checks. Neither allocates: the hot message (Credits, every push's slot coming back) is read
// in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "plait/error.h"
#include "ps/wire.h"

namespace plait::ps::wire {

// A message to a server. kMalformed: a kind a server does not take, or a size not the kind's.
struct ToServer {
  enum class What { kMalformed, kPullRequest, kDone };
  What what = What::kMalformed;
  PullRequest request;  // kPullRequest
};
ToServer decode_to_server(uint64_t header, const std::byte* msg, size_t bytes);

// A message to a worker. kMalformed: a kind a worker does not take, or a size not the kind's.
struct ToWorker {
  enum class What { kMalformed, kCredits, kDoneAck, kFailure };
  What what = What::kMalformed;
  // kCredits: `count` slot indices at `slots` (in the message, unaligned).
  const std::byte* slots = nullptr;
  uint32_t count = 0;
  uint32_t slot(uint32_t i) const {
    uint32_t s;
    std::memcpy(&s, slots + size_t{i} * sizeof s, sizeof s);
    return s;
  }
  // kFailure: the pull it answers (FailureHeader), its category and the reason (in the
  // message).
  uint64_t request = 0;
  uint32_t partition = 0;
  ErrorCategory category = ErrorCategory::kRemote;  // an unknown one reads as kRemote
  std::string_view reason;
};
// `msg` must stay put while the result is used (it points into it).
ToWorker decode_to_worker(uint64_t header, const std::byte* msg, size_t bytes);

}  // namespace plait::ps::wire
