// What the engine's files share (comm_engine.cc, engine_abort.cc): how the transport context
// of a completion says which of the engine's operations it belongs to, and the mark of the
// thread that drives.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>

namespace plait::coll::engine {

// Transport contexts: the kind in the top two bits, then per-kind payload.
constexpr uint64_t kKindShift = 62;
constexpr uint64_t kCollContext = 0, kP2pContext = 1, kControlContext = 2;
constexpr uint64_t kGenerationMask = (uint64_t{1} << 30) - 1;
constexpr size_t kControlBytes = 4096;
// What a control message is, in its header word: an abort notice (its text follows) or a
// stall inquiry (StallInquiryWire).
constexpr uint64_t kAbortNotice = 0, kStallInquiry = 1;
struct StallInquiryWire {
  uint64_t round = 0;
  int64_t request = 0;
};
// The engine wakes at least this often even with nothing to do, to check deadlines.
constexpr auto kMaxSleep = std::chrono::milliseconds(200);

inline uint64_t coll_context(uint64_t seq) {
  return (kCollContext << kKindShift) | ((seq & kGenerationMask) << 32);
}

// Marks the calling thread as the engine's driver while it holds drive_mu_.
class DriverMark {
 public:
  explicit DriverMark(std::atomic<std::thread::id>& driver) : driver_(driver) {
    driver_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  }
  ~DriverMark() { driver_.store(std::thread::id(), std::memory_order_relaxed); }
  DriverMark(const DriverMark&) = delete;
  DriverMark& operator=(const DriverMark&) = delete;

 private:
  std::atomic<std::thread::id>& driver_;
};



}  // namespace plait::coll::engine
