// One set of cost parameters for every member of a communicator. Every member must choose the
// same algorithm for a call, so every member must cost it alike; but a member's own view of
// its links differs where members differ (one alone on its host knows no shared-memory link:
// its "intra-host" link is TCP). Across hosts the first member's parameters apply to all.
#pragma once

#include <chrono>
#include <string>

#include "coll/select/cost_params.h"
#include "plait/store.h"

namespace plait::coll {

// Member 0 publishes `mine` under `key`; the others wait for it (up to `timeout`) and take it.
CostParams agree_on_cost_params(const CostParams& mine, int rank, Store& store, const std::string& key,
                                std::chrono::milliseconds timeout);

}  // namespace plait::coll
