// The replay of a symmetric collective through the ranks of one host: where every rank's
// schedule is that of the rank of host 0 with its place on its host, with peers relabelled
// (peer + d mod p: the ring; peer xor d: the hypercube's halving-doubling and recursive
// doubling; d a multiple of the ranks per host, so that hosts map onto hosts), all hosts run
// the same steps at the same times. Host 0's ranks' steps are replayed; each of their messages
// stands for its copies on every host, which the network carries at once, and whose max-min
// rates are solved once per set of messages in flight (cached: a ring allreduce of 16,384 ranks
// solves one set). Messages between ranks of one host take its memory path, as in the full
// replay. Exact where every copy gets the same rate and latency (a ring on a ring, any of them
// on a star, halving-doubling on a fat tree spraying packets), and checked against the full
// replay there; where copies differ (per-flow ECMP, a ring's neighbours across a fat tree's
// pods), the slowest copy's rate and the longest latency are used (every rank waits for its
// slowest neighbour sooner or later) and the result says so.
#pragma once

#include <optional>
#include <string>

#include "coll/select/algorithms.h"
#include "sim/replay.h"
#include "sim/topology.h"

namespace plait::sim {

struct SymmetricReplay {
  ReplayResult result;
  bool exact = true;        // every copy of every message got the same rate
  std::string relabelling;  // "shift" or "xor"
};

// Nullopt when the call is not symmetric (a tree, ranks that do not fill their hosts evenly,
// shaped links) or the receives do not pair with the sends by symmetry.
std::optional<SymmetricReplay> replay_symmetric(const Topology& topology,
                                                const Placement& placement,
                                                const coll::CollArgs& args,
                                                const coll::AlgorithmInfo& info,
                                                const SimParams& params);

}  // namespace plait::sim
