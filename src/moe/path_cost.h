// The cost model that picks a path per call: t = alpha + beta * rows for each path and kind of
// call (a fresh dispatch, a repeated one, a combine), with rows the rows a rank receives from
// each peer. Both are fitted when the dispatcher is created, from calls that carry 1 and R rows
// (a full dispatch's, up to 256) to every peer on each path. So the fit includes what differs between the paths: the count
// exchange, the one-sided dispatch's copy out of the window, how each transport moves bytes.
// Every rank takes the largest measurement of any rank, so all of them pick the same path
// without a message. The prediction is made at a full dispatch's rows: the choice must not
// depend on counts that only some ranks know.
#pragma once

#include <string>

#include "plait/communicator.h"
#include "plait/moe.h"

namespace plait::moe {

enum class CallKind { kFreshDispatch, kRepeatDispatch, kCombine };

struct PathCosts {
  struct Line {
    double alpha = 0;  // seconds
    double beta = 0;   // seconds per row from each peer
    double at(double rows) const { return alpha + beta * rows; }
  };
  Line alltoallv[3];
  Line one_sided[3];
  double expected_rows = 0;  // a full dispatch's rows from each peer, from the options
  double probe_rows = 0;     // R of the fit

  Path pick(CallKind kind) const;
  std::string summary() const;
};

// Times both paths on `dispatcher` (collective); the one-sided windows must exist.
PathCosts measure_path_costs(Dispatcher& dispatcher, Communicator& comm);

}  // namespace plait::moe
