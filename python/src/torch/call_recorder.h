// What plait.torch.timeline reads: every call of any plait process group of this process made
// while it records, with when the call was issued, when plait started and finished it
// (Work::times(), asked for with CallOptions::timed) and when this rank's threads waited for it.
// Off, a call pays one atomic load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "plait/work.h"

namespace plait::torch_backend {

struct CallRecord {
  const char* op = "";     // "all_gather_into_tensor", "send", ...
  int group = 0;           // CallRecorder::next_group_id() of the process group
  int peer = -1;           // send/recv: the group rank of the other end
  int tag = 0;
  int64_t bytes = 0;       // the larger of what the call reads and what it writes
  int64_t issued_ns = 0;   // steady_clock, when torch handed the call to the group
  std::mutex mu;  // guards what follows: stop() may read while a call is being made
  std::vector<WorkPtr> parts;  // their times() once done
  std::vector<std::pair<int64_t, int64_t>> waits;  // [begin, end) ns of each blocking wait()
};

// A record as Python gets it, once the call is over: times in steady_clock ns (0: unknown).
struct FinishedCall {
  std::string op;
  int group;
  int peer;
  int tag;
  int64_t bytes;
  std::string algorithm;
  int64_t issued_ns, started_ns, finished_ns;
  std::vector<std::pair<int64_t, int64_t>> waits;
};

class CallRecorder {
 public:
  static bool recording() { return on_.load(std::memory_order_relaxed); }
  // Starts afresh: what an earlier recording left is dropped.
  static void start();
  // Stops and hands back the calls recorded; one not finished yet has finished_ns 0.
  static std::vector<FinishedCall> stop();
  // A new record, kept until stop(); null when not recording or when the recording is full.
  static std::shared_ptr<CallRecord> open(const char* op, int group, int64_t bytes);
  static int next_group_id();
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  // Bounds the memory of a recording left on by mistake (a record is ~200 bytes).
  static constexpr size_t kMaxRecords = 1 << 20;
  static std::atomic<bool> on_;
};

}  // namespace plait::torch_backend
