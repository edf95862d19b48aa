// The full replay (replay.h tells its model): the steps of every rank, or of the ranks that
// stand for the others (rank_copies.h), each as its dependencies allow, on a FlowNetwork.
#pragma once

#include <optional>

#include "coll/select/algorithms.h"
#include "sim/rank_copies.h"
#include "sim/replay.h"
#include "sim/topology.h"

namespace plait::sim {

// `args` has its size and host_of set for every rank. Every rank's steps; a call on shaped
// links is replayed twice and the second reported (replay()). Throws kInvalidUsage when the
// replay stops before every step is done or past params.max_flows_solved.
ReplayResult replay_every_rank(const Topology& topology, const Placement& placement,
                               const coll::CollArgs& args, const coll::AlgorithmInfo& info,
                               const SimParams& params);

// The same through the first rank of each host, each message standing for its copies on the
// host's other ranks (RankCopies::rotation_in_hosts), where every rank's schedule is its host's
// first rank's so relabelled (checked on sampled hosts), the hosts are full, and no link is a
// FIFO queue (its order is every rank's posting order). Nullopt otherwise. ReplayResult::method
// is "in-host copies", or "in-host copies, slowest copy" where a message's copies took
// different paths (per-flow ECMP), each message then waiting for its slowest copy (inexact).
struct InHostReplay {
  ReplayResult result;
  bool exact = true;  // every message's copies took the same paths
};
std::optional<InHostReplay> replay_in_host_copies(const Topology& topology,
                                                  const Placement& placement,
                                                  const coll::CollArgs& args,
                                                  const coll::AlgorithmInfo& info,
                                                  const SimParams& params);

}  // namespace plait::sim
