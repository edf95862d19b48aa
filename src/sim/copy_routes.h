// The paths of a message and of its copies (rank_copies.h), grouped: copies that take the same
// paths are one flow per path, weighted by their number (FlowNetwork), and a message whose
// copies all do is replayed exactly as every rank's messages would be.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/rank_copies.h"
#include "sim/replay.h"
#include "sim/topology.h"

namespace plait::sim {

struct CopyGroup {
  std::vector<Path> paths;  // none: the copies stay on their host (its memory path)
  int host = -1;            // the sending host
  int weight = 0;           // copies in the group
};

// The copies of message `message` from rank `from` to rank `to` (copy d goes from
// copies.image(from, d) to copies.image(to, d); its ECMP hash is message * copies + d, the
// message's own where there is one copy). Sets *latency to the longest first path's latency.
std::vector<CopyGroup> group_copies(const Topology& topology, const Placement& placement,
                                    const RankCopies& copies, int from, int to, uint64_t message,
                                    double* latency);

}  // namespace plait::sim
