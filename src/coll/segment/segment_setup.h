// Which collective segment a communicator's engine gets: one over all its ranks when they
// share a host (the "shm" algorithms), else one per host of two or more ranks (the intra-host
// stages of the hierarchical allreduce, CollArgs::host_segments).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "coll/segment/collective_segment.h"
#include "core/clock.h"
#include "plait/store.h"

namespace plait::coll::segment {

struct SegmentPlan {
  std::unique_ptr<CollectiveSegment> segment;  // this rank's, or null
  // The communicator ranks mapping `segment`, in segment rank order; empty: every rank.
  std::vector<int> members;
  // Ranks span hosts and every host of two or more ranks got its segment: each rank learns
  // it from every host's entry in the store, so all agree (a host whose /dev/shm is full
  // sends everybody's hierarchical allreduce back to messages).
  bool host_segments = false;
};

// Collective over the communicator's `size` ranks. `host_of`: per rank its host index, or
// empty when all share one host. Keys live under `prefix` in `store`. Throws plait::Error by
// `deadline` as CollectiveSegment::attach does.
SegmentPlan attach_segments(int rank, int size, const std::vector<int>& host_of, Store& store,
                            const std::string& prefix, uint64_t slot_bytes,
                            const Deadline& deadline);

}  // namespace plait::coll::segment
