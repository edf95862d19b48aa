// What the cost model needs to know of a network it cannot see: how much slower than its host
// link a flow runs when every host talks at once in one of the patterns plait's algorithms
// use. Each figure is one round's max-min rates on the topology, one flow a host (the cost
// model counts the host link's sharing by a host's ranks itself), no replay.
#pragma once

#include <vector>

#include "coll/select/cost_params.h"
#include "sim/replay.h"
#include "sim/topology.h"

namespace plait::sim {

struct Contention {
  // [k]: every host h < hosts exchanges with h ^ 2^k (the hypercube algorithms' rounds).
  std::vector<double> hypercube;
  // Every host sends to the next (a ring across hosts).
  double ring = 1;
};

// Over the first `hosts` hosts of `topology` (placement in blocks uses those). In the hypercube
// patterns every host sends `flows_per_host` flows at once (its ranks, all crossing in such a
// round), and the slowdown beyond the host link's own sharing by them is reported: hashed onto
// a fat tree's paths, 8 flows a host spread where one flow a host collides.
Contention contention_of(const Topology& topology, int hosts, int flows_per_host = 1);

// The cost model's parameters for the machine a replay runs on: intra-host from `params`,
// the network as the software cost plus the latency of the topology's diameter and its host
// links' rate, and the network's contention over the `hosts` hosts the ranks use.
coll::CostParams model_params(const SimParams& params, const Topology& topology, int hosts,
                              int ranks_per_host = 1);

}  // namespace plait::sim
