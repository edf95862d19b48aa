// The registry of schedule builders: which algorithms exist for which collective, how to
// build each, and what each costs under the alpha-beta-gamma model. Adding an algorithm is
// one builder file plus one row in algorithms.cc.
#pragma once

#include <vector>

#include "coll/schedule/schedule.h"
#include "coll/select/cost_params.h"

namespace plait::coll {

using BuildFn = Schedule (*)(const CollArgs& args);

struct AlgorithmInfo {
  CollOp op;
  Algorithm algorithm;
  BuildFn build;  // null for Algorithm::kShm, which is not a schedule
  CostFn cost;
  // Some algorithms apply only to some shapes (e.g. none here need a power of two, but a
  // builder may refuse a shape); null means "always".
  bool (*applies)(const CollArgs& args) = nullptr;
};

// Every registered (op, algorithm) pair.
const std::vector<AlgorithmInfo>& all_algorithms();
// nullptr if the algorithm does not exist for that op.
const AlgorithmInfo* find_algorithm(CollOp op, Algorithm algorithm);
std::vector<Algorithm> algorithms_for(CollOp op);

// Which allreduce the hierarchical builder runs across `hosts` hosts for one shard of
// `count` elements of args.dtype: true for the ring, false for recursive doubling. Decided
// by this registry's cost formulas under default CostParams, not measured ones, on
// purpose: a schedule's shape must follow from the call alone so that every rank builds
// matching steps, while measured parameters are per process and may differ.
bool hierarchical_inter_ring(const CollArgs& args, int hosts, size_t count);

// Whether a hierarchical allreduce of this shape runs its intra-host stages on the hosts'
// collective segments (CollArgs::intra_on_segment): only where every host has one
// (CollArgs::host_segments) and the model finds it cheaper than ring phases over messages.
// `params` must be the same on every rank (the job's, which rank 0 publishes).
bool hierarchical_intra_on_segment(const CollArgs& args, const CostParams& params);
// The slot size the model assumes for host segments: each host sizes its own, and the
// choice above must not depend on which host decides.
inline constexpr uint64_t kCostedSegmentSlot = 64 << 10;

}  // namespace plait::coll
