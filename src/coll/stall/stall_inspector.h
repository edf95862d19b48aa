// The stall inspector: when a collective has waited longer than PLAIT_STALL_WARN, every rank
// of its communicator logs which ranks have and have not called it (stall_report.h), and
// what the others are in.
//
// Detection is local and costs nothing at the store: one thread per process looks at each
// watched communicator once per tick (a quarter of the warning time, 100 ms to 1 s): its
// CollectiveActivity (no clock on the data path: the inspector times a collective from when
// it first saw it), the peers' inquiries the engine recorded there, and for a world
// communicator under `plait run` the launcher's request file (PLAIT_STALL_REQUESTS). That
// thread never calls the store.
//
// A report is a round k. A rank opens it when its collective has waited past the warning
// (once per collective) or `plait run` asks (SIGUSR1), and tells every peer through the
// engine's control channel (a stall inquiry), so that ranks in no collective answer too.
// Each rank in the round writes its state to the store; the first to claim the round gathers
// the states for a while, writes the summary, and every rank logs it. A rank that stays
// silent is named as not answering. The data path may be what is stuck: the states go
// through the store, and a rank the inquiry cannot reach still joins once its own collective
// has waited past the warning.
//
// The store calls of a round run on a thread of that communicator's own, one round at a
// time, so a slow or hung store delays that communicator's report only. It never throws to
// the communicator: a store that fails turns the inspector off for that communicator, with a
// log line.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "coll/engine/activity.h"
#include "plait/store.h"

namespace plait::coll {

struct StallWatch {
  std::shared_ptr<Store> store;       // the communicator's own keys
  std::shared_ptr<Store> job_store;   // job-wide keys (plait run's replies); may be null
  std::string request_file;           // plait run's requests (world communicators); may be ""
  uint32_t comm_id = 0;
  int rank = 0;
  int size = 1;
  std::shared_ptr<const CollectiveActivity> activity;
  // Sends a stall inquiry for (round, request) to every peer; must not block.
  std::function<void(uint64_t round, int64_t request)> inquire;
  std::chrono::milliseconds warn{0};
};

// Watches until the returned handle is destroyed.
class StallWatchHandle {
 public:
  virtual ~StallWatchHandle() = default;
};
std::unique_ptr<StallWatchHandle> watch_for_stalls(StallWatch watch);

// plait run's request file: the number of requests so far, as decimal text (0 when absent
// or unreadable); and where the summary for request n goes in the job's store.
int64_t read_stall_requests(const std::string& path);
inline std::string inspect_reply_key(int64_t n) { return "plait/inspect/" + std::to_string(n); }

}  // namespace plait::coll
