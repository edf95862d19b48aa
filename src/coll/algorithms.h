// The registry of schedule builders: which algorithms exist for which collective, how to
// build each, and what each costs under the alpha-beta-gamma model. Adding an algorithm is
// one builder file plus one row in algorithms.cc.
#pragma once

#include <vector>

#include "coll/schedule.h"

namespace plait::coll {

// Time model of one point-to-point transfer of n bytes: alpha + n / beta; a reduction of n
// bytes costs n / gamma; a local copy n / copy_bw. Units: microseconds and bytes/us.
//
// Two links: alpha_us/beta_bytes_per_us between ranks of one host, inter_* between hosts.
// A call whose CollArgs::host_of names two or more hosts is costed as follows: the
// hierarchical algorithm charges its intra-host phases the intra link and its cross-host
// phase the inter link; every other (flat) algorithm is charged the inter link for all its
// transfers. That is exact for a ring, whose every step waits for the slowest of its
// concurrent transfers and some of them cross hosts, and pessimistic for trees, some of
// whose levels may stay within a host: simple, and it errs against flat algorithms only
// where the hierarchy would help anyway.
struct CostParams {
  double alpha_us = 20.0;
  double beta_bytes_per_us = 1000.0;
  double gamma_bytes_per_us = 4000.0;
  double copy_bytes_per_us = 5000.0;
  // A flag raised on the collective segment, seen by another rank (segment_cost.h).
  double flag_us = 0.3;
  // The inter-host link; 0 = the same as alpha_us / beta_bytes_per_us.
  double inter_alpha_us = 0;
  double inter_beta_bytes_per_us = 0;

  // These parameters with the inter-host link in place of the intra-host one.
  CostParams across_hosts() const {
    CostParams p = *this;
    if (inter_alpha_us > 0) p.alpha_us = inter_alpha_us;
    if (inter_beta_bytes_per_us > 0) p.beta_bytes_per_us = inter_beta_bytes_per_us;
    return p;
  }
};

using BuildFn = Schedule (*)(const CollArgs& args);
using CostFn = double (*)(const CollArgs& args, const CostParams& params);

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
