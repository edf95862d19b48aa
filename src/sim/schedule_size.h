// How big a call's schedules are over all ranks, without holding them all: what the full
// replay checks before it builds every rank's steps (replay.h's limits).
#pragma once

#include "coll/select/algorithms.h"

namespace plait::sim {

struct ScheduleSize {
  double steps = 0;  // over all ranks
  double sends = 0;
};

// Steps and sends of `ranks` ranks' schedules of the call `args` (its size set to `ranks`).
ScheduleSize sample_schedule_size(const coll::CollArgs& args, const coll::AlgorithmInfo& info,
                                  int ranks);

}  // namespace plait::sim
