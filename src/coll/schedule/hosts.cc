#include "coll/schedule/hosts.h"

#include <algorithm>
#include <string>

#include "plait/error.h"

namespace plait::coll {

int HostLayout::max_local() const {
  size_t m = 0;
  for (const auto& r : ranks) m = std::max(m, r.size());
  return static_cast<int>(m);
}

int HostLayout::min_local() const {
  size_t m = ranks.empty() ? 0 : ranks.front().size();
  for (const auto& r : ranks) m = std::min(m, r.size());
  return static_cast<int>(m);
}

HostLayout host_layout(const CollArgs& args) {
  const int n = args.size;
  HostLayout l;
  l.host.assign(static_cast<size_t>(n), 0);
  l.local.assign(static_cast<size_t>(n), 0);
  std::vector<int> labels = args.host_of;
  if (labels.empty()) labels.assign(static_cast<size_t>(n), 0);
  if (labels.size() != static_cast<size_t>(n)) {
    throw invalid_usage("host_of has " + std::to_string(labels.size()) + " entries for " +
                        std::to_string(n) + " ranks");
  }
  std::vector<int> distinct = labels;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  l.ranks.resize(distinct.size());
  for (int r = 0; r < n; ++r) {
    const int label = labels[static_cast<size_t>(r)];
    const auto h = std::lower_bound(distinct.begin(), distinct.end(), label) - distinct.begin();
    auto& members = l.ranks[static_cast<size_t>(h)];
    l.host[static_cast<size_t>(r)] = static_cast<int>(h);
    l.local[static_cast<size_t>(r)] = static_cast<int>(members.size());
    members.push_back(r);
  }
  return l;
}

bool spans_hosts(const CollArgs& args) {
  const auto& h = args.host_of;
  return std::any_of(h.begin(), h.end(), [&](int x) { return x != h.front(); });
}

}  // namespace plait::coll
