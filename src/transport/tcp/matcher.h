// Two-sided matching of the TCP provider: the shared TagMatcher (transport/tag_matcher.h)
// over tcp ops. Arrival order per source is send order because every header of a message
// travels on stream 0 and is parsed there in sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/tag_matcher.h"
#include "transport/pending_op.h"

namespace plait::transport::tcp {

// Eager payloads are written into `data` by the socket reader after the entry is queued
// (`complete` says when they are all there); kRts keeps the sender's op id for the CTS.
using Unexpected = UnexpectedMessage;
using UnexpectedRef = std::shared_ptr<Unexpected>;

class Matcher : public TagMatcher<Op, Unexpected> {
 public:
  // A message header from `source`; `sender_op` is kept for a rendezvous request.
  Arrival arrive(int source, uint64_t tag, uint64_t header, uint64_t length, bool rendezvous,
                 uint64_t sender_op) {
    return TagMatcher::arrive(source, tag, header, length, rendezvous,
                              [&](Unexpected& e) { e.sender_op = sender_op; });
  }
};

}  // namespace plait::transport::tcp
