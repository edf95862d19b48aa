// The cost model that picks a path per call: both paths move the same bytes over the same
// fabric, so they differ by their fixed cost (the alltoallv path's count exchange and its
// collective's setup; the one-sided path's immediates) and by the one-sided dispatch's copy
// out of the window. The fixed costs are measured when the dispatcher is created, by timing
// calls that carry one row to each other rank on each path; the copy by a memcpy. Every rank takes the largest
// measurement of any rank, so all of them pick the same path without a message.
#pragma once

#include <string>

#include "plait/communicator.h"
#include "plait/moe.h"

namespace plait::moe {

enum class CallKind { kFreshDispatch, kRepeatDispatch, kCombine };

struct PathCosts {
  // Seconds a call with a row for each other rank takes, by kind, on each path.
  double alltoallv[3] = {0, 0, 0};
  double one_sided[3] = {0, 0, 0};
  double copy_bytes_per_s = 1e10;
  double expected_recv_bytes = 0;  // a full dispatch's rows per rank, from the options

  Path pick(CallKind kind) const;
  std::string summary() const;
};

// Times both paths on `dispatcher` (collective); the one-sided windows must exist.
PathCosts measure_path_costs(Dispatcher& dispatcher, Communicator& comm);

}  // namespace plait::moe
