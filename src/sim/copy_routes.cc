#include "sim/copy_routes.h"

#include <algorithm>

namespace plait::sim {
namespace {

bool same_paths(const std::vector<Path>& a, const std::vector<Path>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].links != b[i].links || a[i].share != b[i].share) return false;
  return true;
}

}  // namespace

std::vector<CopyGroup> group_copies(const Topology& topology, const Placement& placement,
                                    const RankCopies& copies, int from, int to, uint64_t message,
                                    double* latency) {
  std::vector<CopyGroup> groups;
  *latency = 0;
  for (int d = 0; d < copies.copies(); ++d) {
    const int src = placement.host_of(copies.image(from, d));
    const int dst = placement.host_of(copies.image(to, d));
    std::vector<Path> paths;
    if (src != dst) {
      paths = topology.route(src, dst, message * static_cast<uint64_t>(copies.copies()) + d);
      double l = 0;
      for (int link : paths[0].links) l += topology.links()[link].latency_s;
      *latency = std::max(*latency, l);
    }
    auto same = std::find_if(groups.begin(), groups.end(), [&](const CopyGroup& g) {
      return g.host == src && same_paths(g.paths, paths);
    });
    if (same != groups.end()) {
      ++same->weight;
    } else {
      groups.push_back({std::move(paths), src, 1});
    }
  }
  return groups;
}

}  // namespace plait::sim
