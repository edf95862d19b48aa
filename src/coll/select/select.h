// Which algorithm runs a collective: the caller's choice (CallOptions::algorithm), else
// PLAIT_ALGO_<OP>, else the cheapest applicable algorithm under the alpha-beta-gamma model.
// On a call whose CollArgs::host_of spans hosts the model uses both links of CostParams
// (algorithms.h); the hierarchical allreduce is a candidate only there.
//
// Every rank must reach the same choice, so every rank must pass the same args (host_of
// included) and the same CostParams.
#pragma once

#include <string>

#include "coll/select/algorithms.h"
#include "core/config.h"

namespace plait::coll {

struct Selection {
  const AlgorithmInfo* info = nullptr;
  std::string reason;  // "forced by PLAIT_ALGO_ALLREDUCE=ring", "cost model: ring 812 us < ..."
  bool intra_on_segment = false;  // CollArgs::intra_on_segment for this call
};

// Throws Error(kInvalidUsage) when a forced algorithm does not exist for the op or does not
// apply to this call, listing the ones that do.
Selection select_algorithm(const CollArgs& args, const std::string& call_choice,
                           const Config& config, const CostParams& params);

}  // namespace plait::coll
