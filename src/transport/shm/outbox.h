// The sending side of one ordered pair: our ring in the peer's segment, plus the records
// that wait for room in it, in order. Nothing that sends ever blocks on a full ring: what
// does not fit is queued here and flushed by whoever drains next (the progress thread or an
// inline poller), which the peer's consumer wakes through our doorbell when it frees room.
//
// Queued items keep what they need to produce their bytes later: a copy (control records,
// denials), the user's memory and op (an eager send completes when it is written; a stream
// of pieces for the copy fallback: a rendezvous send's data or a write), or a registered
// region (a read response is copied out under the region's pin when it is written).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/futex_mutex.h"
#include "transport/memory_registry.h"
#include "transport/shm/layout.h"
#include "transport/pending_op.h"
#include "transport/shm/ring.h"

namespace plait::transport::shm {

struct Pending {
  enum class Kind { kCopy, kEagerSend, kStream, kRegionRead };
  Kind kind = Kind::kCopy;
  Record header;
  std::string bytes;             // kCopy: the payload
  OpRef op;                      // kEagerSend, kStream: the op whose memory is sent
  const char* source = nullptr;  // kEagerSend, kStream: the user's memory
  uint64_t total = 0;            // kStream: bytes to send; kRegionRead: bytes to read
  uint64_t sent = 0;             // kStream: bytes sent so far
  uint64_t chunk = 0;            // kStream: piece size
  RegionRef region;              // kRegionRead: read at region->base() + offset
  uint64_t offset = 0;
  std::string if_revoked;        // kRegionRead: the denial if the region went meanwhile
};

class Outbox {
 public:
  // Told when a queued send's last byte is in the ring (it completes then).
  using SentFn = std::function<void(const OpRef&)>;

  // Before any other call.
  void init(RingWriter ring, SegmentHeader* peer_header, SentFn on_sent) {
    ring_ = ring;
    peer_header_ = peer_header;
    on_sent_ = std::move(on_sent);
  }

  // The fast path: writes the record if nothing is queued and the ring has room.
  bool try_write(const Record& r, const void* payload, size_t n);
  // Writes what fits now, queues the rest (in order).
  void post(Pending item);
  // Writes queued items while the ring has room; true if it wrote any.
  bool flush();
  // Wakes the peer's progress thread if it sleeps and no thread of the peer polls.
  void notify();
  // Drops everything queued (the peer is gone); queued ops are failed by the caller's sweep.
  void clear();
  // Returns once no queued item is being copied out of user memory: a caller that has just
  // marked ops finished knows that every later copy sees them finished (cancel()).
  void fence() { std::lock_guard lock(mu_); }

  bool has_backlog() const { return backlog_size_.load(std::memory_order_acquire) != 0; }
  // The largest payload of one record in this ring.
  size_t max_payload() const { return ring_.max_record() - sizeof(Record); }

 private:
  enum class Emit { kDone, kPartial, kFull };
  Emit emit_locked(Pending& item, std::vector<OpRef>* sent);
  bool flush_locked(std::vector<OpRef>* sent);
  static size_t next_bytes(const Pending& item);
  void report(const std::vector<OpRef>& sent);

  FutexMutex mu_;
  RingWriter ring_;                   // guarded by mu_
  std::deque<Pending> backlog_;       // guarded by mu_
  std::atomic<size_t> backlog_size_{0};
  SegmentHeader* peer_header_ = nullptr;
  SentFn on_sent_;
};

}  // namespace plait::transport::shm
