// Two-sided matching of the TCP provider: the shared TagMatcher (transport/tag_matcher.h)
// over tcp ops. Arrival order per source is send order because every header of a message
// travels on stream 0 and is parsed there in sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/tag_matcher.h"
#include "transport/tcp/op.h"

namespace plait::transport::tcp {

struct Unexpected {
  int source = -1;
  uint64_t tag = 0;
  uint64_t header = 0;
  uint64_t length = 0;
  bool rendezvous = false;
  uint64_t sender_op = 0;      // kRts: the sender's op id, echoed in the CTS
  std::vector<char> data;      // kEager: the payload; written by the progress thread
  bool complete = false;       // kEager: payload all there. Guarded by the matcher's lock
  OpRef claimed_by;            // a recv matched it before the payload was complete
};
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
