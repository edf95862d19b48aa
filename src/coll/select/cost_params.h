// The parameters of the alpha-beta-gamma cost model that chooses algorithms (select.h), and
// the shape of a cost function.
#pragma once

#include <vector>

#include "coll/schedule/schedule.h"

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
  // The network's contention: the factor on a cross-host flow's time when every host's ranks
  // exchange with the host 2^k hosts away (host_contention[k], beyond their sharing of the
  // host link; the last entry serves farther ones), and when every host sends to the next
  // (ring_contention). 1 is a non-blocking network, and what a job assumes unless told (plait
  // sim computes them from its topology; plait tune --topology writes them for jobs).
  std::vector<double> host_contention;
  double ring_contention = 1;
  // What all the transfers within one host share: its memory path, bytes per us. 0 = unknown:
  // they do not slow each other (a host's cores copy in parallel). plait sim's hosts have one
  // (SimParams::intra_bytes_per_s), and the model then charges it as the replay does.
  double host_memory_bytes_per_us = 0;

  // These parameters with the inter-host link in place of the intra-host one.
  CostParams across_hosts() const {
    CostParams p = *this;
    if (inter_alpha_us > 0) p.alpha_us = inter_alpha_us;
    if (inter_beta_bytes_per_us > 0) p.beta_bytes_per_us = inter_beta_bytes_per_us;
    return p;
  }
};

// An algorithm's time on the critical path, in microseconds, for the call `args`.
using CostFn = double (*)(const CollArgs& args, const CostParams& params);

}  // namespace plait::coll
