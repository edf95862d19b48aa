#include "coll/segment/segment_setup.h"

#include <algorithm>
#include <map>

namespace plait::coll::segment {

SegmentPlan attach_segments(int rank, int size, const std::vector<int>& host_of, Store& store,
                            const std::string& prefix, uint64_t slot_bytes,
                            const Deadline& deadline) {
  SegmentPlan plan;
  if (host_of.empty()) {
    if (size >= 2) plan.segment = CollectiveSegment::attach(rank, size, store, prefix, slot_bytes, deadline);
    return plan;
  }
  // Each host's ranks in rank order: local rank 0 creates its host's segment.
  std::map<int, std::vector<int>> hosts;
  for (int r = 0; r < size; ++r) hosts[host_of[static_cast<size_t>(r)]].push_back(r);
  const auto key = [&](int host) { return prefix + "/host/" + std::to_string(host); };
  const std::vector<int>& mine = hosts[host_of[static_cast<size_t>(rank)]];
  if (mine.size() >= 2) {
    const int local = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
    plan.segment = CollectiveSegment::attach(local, static_cast<int>(mine.size()), store,
                                             key(host_of[static_cast<size_t>(rank)]), slot_bytes,
                                             deadline);
    if (plan.segment) plan.members = mine;
  }
  // Every host's first rank publishes its entry (a segment's name, or "none") before it
  // waits for the others to map it, so these reads end.
  plan.host_segments = true;
  for (const auto& [host, ranks] : hosts) {
    if (ranks.size() < 2) continue;
    const std::chrono::milliseconds left(std::max(1, deadline.remaining_ms()));
    if (store.get_string(key(host), left) == "none") plan.host_segments = false;
  }
  return plan;
}

}  // namespace plait::coll::segment
