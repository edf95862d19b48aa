#include "sim/contention.h"

#include <algorithm>
#include <functional>

#include "sim/flow_network.h"

namespace plait::sim {
namespace {

// The slowest flow's time over its time alone on its host link, for `flows` flows from every
// host h to partner(h) (none where partner(h) < 0), divided by `flows`: what the network adds
// to the host link's sharing.
double slowdown(const Topology& t, int hosts, int flows, const std::function<int(int)>& partner) {
  std::vector<double> capacity;
  for (const Link& l : t.links()) capacity.push_back(l.bytes_per_s);
  FlowNetwork net(std::move(capacity));
  struct Sub {
    int flow;
    double bytes;
  };
  std::vector<std::vector<Sub>> subs;
  std::vector<double> alone;
  constexpr double kBytes = 1 << 20;
  for (int h = 0; h < hosts; ++h) {
    const int to = partner(h);
    if (to < 0 || to == h || to >= hosts) continue;
    for (int f = 0; f < flows; ++f) {
      std::vector<Sub> mine;
      double first_rate = 0;
      for (const Path& path : t.route(h, to, static_cast<uint64_t>(h) * static_cast<uint64_t>(flows) + f)) {
        if (path.links.empty()) continue;
        first_rate = t.links()[static_cast<size_t>(path.links.front())].bytes_per_s;
        mine.push_back({net.add(kBytes * path.share, path.links), kBytes * path.share});
      }
      if (mine.empty() || first_rate <= 0) continue;
      subs.push_back(std::move(mine));
      alone.push_back(kBytes / first_rate);
    }
  }
  if (subs.empty()) return 1;
  net.next_finish();  // solves the rates
  double worst = 1;
  for (size_t i = 0; i < subs.size(); ++i) {
    double time = 0;
    for (const Sub& s : subs[i]) {
      const double rate = net.rate(s.flow);
      if (rate > 0) time = std::max(time, s.bytes / rate);
    }
    worst = std::max(worst, time / alone[i]);
  }
  return std::max(1.0, worst / flows);
}

}  // namespace

Contention contention_of(const Topology& topology, int hosts, int flows_per_host) {
  Contention c;
  hosts = std::min(hosts, topology.hosts());
  flows_per_host = std::max(1, flows_per_host);
  for (int d = 1; d < hosts; d *= 2)
    c.hypercube.push_back(slowdown(topology, hosts, flows_per_host, [d](int h) { return h ^ d; }));
  // A ring crosses each host boundary once.
  if (hosts > 1) c.ring = slowdown(topology, hosts, 1, [hosts](int h) { return (h + 1) % hosts; });
  return c;
}

coll::CostParams model_params(const SimParams& p, const Topology& t, int hosts, int ranks_per_host) {
  coll::CostParams c;
  c.alpha_us = p.intra_alpha_s * 1e6;
  c.beta_bytes_per_us = p.intra_bytes_per_s / 1e6;
  c.gamma_bytes_per_us = p.gamma_bytes_per_s / 1e6;
  c.copy_bytes_per_us = p.copy_bytes_per_s / 1e6;
  c.host_memory_bytes_per_us = p.intra_bytes_per_s / 1e6;  // the replay's memory path a host
  const Link& link = t.links().front();
  c.inter_alpha_us = (p.alpha_s + link.latency_s * t.diameter()) * 1e6;
  c.inter_beta_bytes_per_us = link.bytes_per_s / 1e6;
  if (hosts > 1) {
    const Contention contention = contention_of(t, hosts, ranks_per_host);
    c.host_contention = contention.hypercube;
    c.ring_contention = contention.ring;
  }
  return c;
}

}  // namespace plait::sim
