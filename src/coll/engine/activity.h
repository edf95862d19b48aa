// What collective this rank is in, for the stall inspector: written by the engine at every
// collective's start and end (a few relaxed stores, no clock), read by the inspector's thread
// now and then. A sequence lock keeps a read from mixing two collectives' fields. It also
// carries the peers' stall inquiries from the engine to the inspector.
//
// The start time is the inspector's coarse clock (coarse_clock_ms, which its thread sets at
// each wake-up, every 100 ms): a relaxed load instead of a clock read per collective.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "coll/schedule/signature.h"

namespace plait::coll {

// Milliseconds of the steady clock as the stall inspector's thread last saw them (0: no
// inspector runs yet).
inline std::atomic<int64_t> coarse_clock_ms{0};

class CollectiveActivity {
 public:
  struct Snapshot {
    bool started = false;    // some collective has started
    Signature current;       // started: the last collective started
    bool in_collective = false;  // ... and it has not ended
    bool closed = false;     // the communicator aborted
    int64_t started_ms = 0;  // coarse_clock_ms when `current` started (0: unknown)
  };

  void started(const Signature& sig) {
    const uint64_t v = version_.load(std::memory_order_relaxed);
    version_.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    seq_.store(sig.seq + 1, std::memory_order_relaxed);
    shape_.store(shape_of(sig), std::memory_order_relaxed);
    count_.store(sig.count, std::memory_order_relaxed);
    started_ms_.store(coarse_clock_ms.load(std::memory_order_relaxed), std::memory_order_relaxed);
    version_.store(v + 2, std::memory_order_release);
  }
  void finished(uint64_t seq) { finished_.store(seq + 1, std::memory_order_release); }
  void close() { finished_.store(UINT64_MAX, std::memory_order_release); }

  // A peer's stall inquiry (the engine's control channel): it opened stall-report round
  // `round`, for `plait run`'s request `request` (0: for a stall it saw). The inspector's
  // thread takes the latest.
  struct Inquiry {
    uint64_t round = 0;  // 0: none yet
    int64_t request = 0;
  };
  void inquired(const Inquiry& inquiry) {
    std::lock_guard lock(inquiry_mu_);
    if (inquiry.round > inquiry_.round) inquiry_ = inquiry;
  }
  Inquiry inquiry() const {
    std::lock_guard lock(inquiry_mu_);
    return inquiry_;
  }

  Snapshot read() const {
    Snapshot s;
    for (;;) {
      const uint64_t v = version_.load(std::memory_order_acquire);
      if (v & 1) continue;
      s.current.seq = seq_.load(std::memory_order_relaxed);
      const uint64_t shape = shape_.load(std::memory_order_relaxed);
      s.current.count = count_.load(std::memory_order_relaxed);
      s.started_ms = started_ms_.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (version_.load(std::memory_order_relaxed) != v) continue;
      s.current.op = static_cast<CollOp>(shape & 0xff);
      s.current.dtype = static_cast<DataType>((shape >> 8) & 0xff);
      s.current.redop = static_cast<ReduceOp>((shape >> 16) & 0xff);
      s.current.root = static_cast<int>(static_cast<int32_t>(shape >> 32));
      break;
    }
    const uint64_t finished = finished_.load(std::memory_order_acquire);
    s.started = s.current.seq != 0;
    s.in_collective = s.current.seq > finished;
    s.closed = finished == UINT64_MAX;
    if (s.started) --s.current.seq;
    return s;
  }

 private:
  static uint64_t shape_of(const Signature& sig) {
    return static_cast<uint64_t>(sig.op) | static_cast<uint64_t>(sig.dtype) << 8 |
           static_cast<uint64_t>(sig.redop) << 16 |
           static_cast<uint64_t>(static_cast<uint32_t>(sig.root)) << 32;
  }
  std::atomic<uint64_t> version_{0};
  // Sequence numbers plus one (0: none), as the first collective is #0.
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> shape_{0};
  std::atomic<uint64_t> count_{0};
  std::atomic<int64_t> started_ms_{0};
  std::atomic<uint64_t> finished_{0};
  mutable std::mutex inquiry_mu_;  // rare: once per stall report
  Inquiry inquiry_;
};

}  // namespace plait::coll
