#include "sim/rank_copies.h"

#include <algorithm>
#include <vector>

namespace plait::sim {

bool RankCopies::relabel_sampled_hosts(coll::CollArgs args, const coll::AlgorithmInfo& info) const {
  const int n = reps();
  std::vector<int> sampled = {0, 1, 2, n / 3, n / 2, n / 2 + 1, n - 2, n - 1};
  std::sort(sampled.begin(), sampled.end());
  sampled.erase(std::unique(sampled.begin(), sampled.end()), sampled.end());
  for (int i : sampled) {
    if (i < 0 || i >= n) continue;
    args.rank = rep_rank(i);
    const coll::Schedule rep = info.build(args);
    for (int d = 1; d < copies(); ++d) {
      args.rank = image(rep_rank(i), d);
      if (!relabels(rep, info.build(args), d)) return false;
    }
  }
  return true;
}

}  // namespace plait::sim
