// The cost of the "shm" algorithms (segment_run.h) under the alpha-beta-gamma model of
// cost_params.h, with the segment's own latency: a flag raised by one rank and seen by
// another (CostParams::flag_us, a cache line's trip between cores) instead of a message.
#pragma once

#include "coll/select/cost_params.h"

namespace plait::coll::segment {

// The communicator has a collective segment (every rank on one host).
bool segment_applies(const CollArgs& args);
// Time on the critical path, in microseconds, for allreduce, reduce, broadcast, allgather,
// reduce_scatter and barrier.
double segment_cost(const CollArgs& args, const CostParams& params);

}  // namespace plait::coll::segment
