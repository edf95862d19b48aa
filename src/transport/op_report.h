// What the providers' pending operations (tcp::Op, shm::Op) have in common when they are
// reported: the Completion built from one, and the truncation error of a receive. Both op
// types name these fields alike (context, type, peer, tag, length, message_length,
// message_header).
#pragma once

#include <cstdint>
#include <string>

#include "plait/error.h"
#include "transport/fabric.h"

namespace plait::transport {

template <typename Op>
Completion completion_of(const Op& op) {
  Completion c;
  c.context = op.context;
  c.op = op.type;
  c.peer = op.peer.load(std::memory_order_relaxed);
  c.tag = op.tag;
  switch (op.type) {
    case OpType::kRecv:
      c.bytes = op.message_length.load(std::memory_order_relaxed);
      c.header = op.message_header.load(std::memory_order_relaxed);
      break;
    case OpType::kFetchAdd:
    case OpType::kCompareSwap:
      c.bytes = sizeof(uint64_t);
      break;
    default:
      c.bytes = op.length;
  }
  return c;
}

// The error of a message of `length` bytes matched to a receive whose buffer is smaller.
template <typename Op>
Error truncation_error(const Op& recv, uint64_t length, ErrorContext context) {
  return invalid_usage("message of " + std::to_string(length) + " bytes from rank " +
                           std::to_string(recv.peer.load()) + " (tag " +
                           std::to_string(recv.tag) + ") does not fit the receive buffer of " +
                           std::to_string(recv.length) + " bytes",
                       std::move(context));
}

}  // namespace plait::transport
