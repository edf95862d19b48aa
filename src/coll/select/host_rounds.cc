#include "coll/select/host_rounds.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "coll/schedule/layout.h"

namespace plait::coll {

HostRounds::HostRounds(const CollArgs& args, const CostParams& params)
    : layout_(host_layout(args)), intra_(params), inter_(params.across_hosts()) {
  const int n = args.size;
  ring_ = load(n, [n](int r) { return (r + 1) % n; });
}

template <typename Partner>
HostRounds::Load HostRounds::load(int senders, Partner partner) const {
  std::vector<int> crossing(static_cast<size_t>(layout_.hosts()), 0), within(crossing.size(), 0);
  Load l;
  for (int r = 0; r < senders; ++r) {
    const int to = partner(r);
    if (to < 0 || to == r) continue;
    const int h = layout_.host[static_cast<size_t>(r)], g = layout_.host[static_cast<size_t>(to)];
    if (h == g) {
      l.within = std::max(l.within, ++within[static_cast<size_t>(h)]);
    } else {
      l.crossing = std::max(l.crossing, ++crossing[static_cast<size_t>(h)]);
    }
  }
  return l;
}

double HostRounds::contention(int rank_distance) const {
  const auto& c = intra_.host_contention;
  if (c.empty()) return 1;
  // Ranks `rank_distance` apart sit that many hosts apart divided by the ranks a host holds.
  const int hosts_apart = std::max(1, rank_distance / std::max(1, layout_.max_local()));
  const size_t k = std::min(static_cast<size_t>(ceil_log2(hosts_apart)), c.size() - 1);
  return std::max(1.0, c[k]);
}

double HostRounds::cost(const Load& l, double bytes, double pieces, double contention) const {
  double t = 0;
  if (l.crossing > 0)
    t = pieces * inter_.alpha_us + bytes * l.crossing * contention / inter_.beta_bytes_per_us;
  if (l.within > 0) t = std::max(t, pieces * intra_.alpha_us + bytes * within_per_byte(l.within));
  return t;
}

double HostRounds::within_per_byte(int transfers) const {
  const double one = 1.0 / intra_.beta_bytes_per_us;
  if (intra_.host_memory_bytes_per_us <= 0) return one;
  return std::max(one, transfers / intra_.host_memory_bytes_per_us);
}

double HostRounds::hypercube(int mask, double bytes, double pieces) const {
  const int n = floor_pow2(static_cast<int>(layout_.host.size()));
  return cost(load(n, [mask](int r) { return r ^ mask; }), bytes, pieces, contention(mask));
}

double HostRounds::tree_level(int distance, double bytes, double pieces) const {
  const int n = static_cast<int>(layout_.host.size());
  return cost(load(n, [distance, n](int r) { return r % (2 * distance) == 0 && r + distance < n ? r + distance : -1; }),
              bytes, pieces, contention(distance));
}

double HostRounds::ring_step(double bytes, double pieces) const {
  const double n = static_cast<double>(layout_.host.size());
  // Hops that cross hosts: one a host for ranks placed in blocks.
  double crossing_hops = 0;
  for (size_t r = 0; r < layout_.host.size(); ++r)
    crossing_hops += layout_.host[r] != layout_.host[(r + 1) % layout_.host.size()];
  const double alpha = (crossing_hops * inter_.alpha_us + (n - crossing_hops) * intra_.alpha_us) / n;
  double per_byte = 0;
  if (ring_.crossing > 0)
    per_byte = ring_.crossing * std::max(1.0, intra_.ring_contention) / inter_.beta_bytes_per_us;
  if (ring_.within > 0 && intra_.host_memory_bytes_per_us > 0) {
    // The host's hops share its memory path only while their copies overlap: a step whose
    // latency dwarfs its copy staggers them, each rank waiting on its predecessor.
    const double alone = bytes / pieces / intra_.beta_bytes_per_us;
    const double overlap = alone / (alpha + alone);
    const double sharing = 1 + (ring_.within - 1) * overlap;
    per_byte = std::max(per_byte, std::max(1 / intra_.beta_bytes_per_us, sharing / intra_.host_memory_bytes_per_us));
  } else if (ring_.within > 0) {
    per_byte = std::max(per_byte, 1 / intra_.beta_bytes_per_us);
  }
  return pieces * alpha + bytes * per_byte;
}

double HostRounds::all_pairs(double bytes) const {
  const double n = static_cast<double>(layout_.host.size());
  double crossing = 0, within = 0, far = 1;
  for (int h = 0; h < layout_.hosts(); ++h) {
    const double s = layout_.ranks_on(h);
    crossing = std::max(crossing, s * (n - s));
    within = std::max(within, s * (s - 1));
  }
  // Partners at every distance: the network's contention, averaged over the distances.
  if (!intra_.host_contention.empty()) {
    far = 0;
    for (double c : intra_.host_contention) far += std::max(1.0, c);
    far /= static_cast<double>(intra_.host_contention.size());
  }
  const double s = layout_.max_local();
  const double alpha = ((n - s) * inter_.alpha_us + (s - 1) * intra_.alpha_us) / std::max(1.0, n - 1);
  double per_byte = crossing * far / inter_.beta_bytes_per_us;
  if (within > 0) per_byte = std::max(per_byte, within_per_byte(static_cast<int>(within)));
  return (n - 1) * alpha + bytes * per_byte;
}

}  // namespace plait::coll
