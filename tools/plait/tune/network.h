// `plait tune --topology`: the network's contention, computed by the simulator, into the tune
// file (network.cc says why).
#pragma once

#include <string>

#include "plait/tune/options.h"

namespace plait::cli {

// Writes `path`; throws kInvalidUsage for a bad topology or more hosts than it has.
int run_tune_network(const TuneOptions& options, const std::string& path);

}  // namespace plait::cli
