// The stall inspector: when a collective has waited longer than PLAIT_STALL_WARN, every rank
// of its communicator logs which ranks have and have not called it (stall_report.h), and
// what the others are in. The data path may be what is stuck, so the ranks compare notes
// through the job's store instead, from one thread per process:
//
//   - Each watched communicator is looked at once per tick (a quarter of the warning time,
//     100 ms to 1 s): its CollectiveActivity (no clock on the data path: the inspector times
//     a collective from when it first saw it) and whether a round has been opened.
//   - A rank whose collective has waited past the warning opens round k (key R<k>), once per
//     collective. `plait run` opens one on SIGUSR1 (job-wide key plait/inspect, world
//     communicators only).
//   - In a round every rank writes its state; the first to claim the round gathers them for
//     a while, writes the summary, and every rank logs it. A rank that stays silent is named
//     as not answering.
//
// It never throws to the communicator: a store that fails turns the inspector off for that
// communicator, with a log line.
#pragma once

#include <chrono>
#include <memory>

#include "coll/activity.h"
#include "plait/store.h"

namespace plait::coll {

struct StallWatch {
  std::shared_ptr<Store> store;       // the communicator's own keys
  std::shared_ptr<Store> job_store;   // job-wide keys (plait run's requests); may be null
  uint32_t comm_id = 0;
  int rank = 0;
  int size = 1;
  std::shared_ptr<const CollectiveActivity> activity;
  std::chrono::milliseconds warn{0};
};

// Watches until the returned handle is destroyed.
class StallWatchHandle {
 public:
  virtual ~StallWatchHandle() = default;
};
std::unique_ptr<StallWatchHandle> watch_for_stalls(StallWatch watch);

// The job-wide key `plait run` bumps on SIGUSR1, and where the summary for request n goes.
inline constexpr const char* kInspectRequestKey = "plait/inspect";
inline std::string inspect_reply_key(int64_t n) { return "plait/inspect/" + std::to_string(n); }

}  // namespace plait::coll
