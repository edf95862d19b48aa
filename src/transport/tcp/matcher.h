// Two-sided matching: posted receives against arriving message headers, per (source, tag),
// in order. Arrival order per source is send order because every header of a message
// travels on stream 0 and is parsed there in sequence. A header nobody waits for becomes an
// Unexpected entry (its eager payload buffered, or the sender's rendezvous request kept).
//
// The linear scans are deliberate: posted and unexpected lists are short in practice (a few
// per peer), and any-source receives make an index by source awkward.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

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

class Matcher {
 public:
  struct Arrival {
    OpRef recv;                // a posted recv, now removed and bound to the source
    UnexpectedRef unexpected;  // else the new entry, already queued
  };
  // A message header from `source`.
  Arrival arrive(int source, uint64_t tag, uint64_t header, uint64_t length, bool rendezvous,
                 uint64_t sender_op);

  struct Posted {
    UnexpectedRef match;  // null: the recv is queued
    bool complete = false;  // the match's payload is there (else the recv claimed it)
  };
  // A new recv: the oldest matching unexpected message (removed), else the recv is queued.
  Posted post(const OpRef& recv);

  // The eager payload of an unexpected entry is all there; returns the recv that claimed it
  // meanwhile, if any.
  OpRef payload_complete(const UnexpectedRef& entry);

  // Removes posted recvs that finished (cancelled or failed).
  void purge_finished();
  // Drops what can never complete from a failed source: rendezvous requests and eager
  // messages whose payload was cut off. Complete eager messages stay deliverable.
  void drop_incomplete_from(int source);

 private:
  mutable std::mutex mu_;
  std::list<OpRef> posted_;
  std::list<UnexpectedRef> unexpected_;
};

}  // namespace plait::transport::tcp
