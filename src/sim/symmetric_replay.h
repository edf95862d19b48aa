// The replay of a symmetric collective through one rank: where every rank's schedule is rank
// 0's with its peers relabelled (peer + r mod p: the ring; peer xor r: halving-doubling,
// recursive doubling) and every rank has a host of its own, all ranks run the same steps at
// the same times. Rank 0's steps are replayed; each message of rank 0 stands for its p copies,
// which the network carries at once; their max-min rates are solved once per set of messages
// in flight (cached: a ring allreduce of 16,384 ranks solves one set). Exact where every copy
// gets the same rate and latency (a ring on a ring, any of them on a star, halving-doubling on a
// fat tree spraying packets), and checked against the full replay there; where copies differ
// (per-flow ECMP, a ring's neighbours across a fat tree's pods), the slowest copy's rate and
// the longest latency are used (every rank waits for its slowest neighbour sooner or later)
// and the result says so.
#pragma once

#include <optional>
#include <string>

#include "coll/algorithms.h"
#include "sim/replay.h"
#include "sim/topology.h"

namespace plait::sim {

struct SymmetricReplay {
  ReplayResult result;
  bool exact = true;        // every copy of every message got the same rate
  std::string relabelling;  // "shift" or "xor"
};

// Nullopt when the call is not symmetric (another algorithm, several ranks per host, shaped
// links) or rank 0's schedule does not pair its receives with its own sends by symmetry.
std::optional<SymmetricReplay> replay_symmetric(const Topology& topology,
                                                const Placement& placement,
                                                const coll::CollArgs& args,
                                                const coll::AlgorithmInfo& info,
                                                const SimParams& params);

}  // namespace plait::sim
