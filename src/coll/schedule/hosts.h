// Which communicator ranks share a host (CollArgs::host_of), in the forms the hierarchical
// algorithm and the cost model need. Host index values are labels: any non-negative ints,
// not necessarily dense or contiguous in rank order; hosts are ordered by label.
#pragma once

#include <vector>

#include "coll/schedule/schedule.h"

namespace plait::coll {

struct HostLayout {
  std::vector<std::vector<int>> ranks;  // per host, in label order: its ranks, ascending
  std::vector<int> host;                // per rank: index of its host in `ranks`
  std::vector<int> local;               // per rank: its position among its host's ranks
  int hosts() const { return static_cast<int>(ranks.size()); }
  int ranks_on(int h) const { return static_cast<int>(ranks[static_cast<size_t>(h)].size()); }
  int max_local() const;  // ranks on the most populated host
  int min_local() const;  // ranks on the least populated host
};

// An empty host_of means one host holding every rank; one of the wrong length throws
// plait::Error (invalid usage). The result is the same on every rank.
HostLayout host_layout(const CollArgs& args);

// host_of names two or more hosts: some transfers of a flat algorithm cross hosts.
bool spans_hosts(const CollArgs& args);

}  // namespace plait::coll
