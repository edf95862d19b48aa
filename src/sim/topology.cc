#include "sim/topology.h"

#include <algorithm>
#include <cstdio>
#include <deque>

#include "plait/error.h"

namespace plait::sim {

std::string describe(const LinkSpec& link) {
  const double bits = link.bytes_per_s * 8;
  char buf[96];
  const bool giga = bits >= 1e9;
  const double us = link.latency_s * 1e6;
  std::snprintf(buf, sizeof buf, "rate=%g%s,latency=%g%s", giga ? bits / 1e9 : bits / 1e6,
                giga ? "gbit" : "mbit", us >= 1 || us == 0 ? us : us * 1e3,
                us >= 1 || us == 0 ? "us" : "ns");
  std::string out = buf;
  if (link.burst_bytes > 0) {
    const double peak_bits = link.peak_bytes_per_s * 8;
    std::snprintf(buf, sizeof buf, ",burst=%gkb,peak=%g%s", link.burst_bytes / 1024,
                  peak_bits >= 1e9 ? peak_bits / 1e9 : peak_bits / 1e6,
                  peak_bits >= 1e9 ? "gbit" : "mbit");
    out += buf;
  }
  if (link.mtu > 0) out += ",mtu=" + std::to_string(link.mtu);
  if (link.fifo) out += ",queue=fifo";
  return out;
}

Topology::Topology(std::string spec, int hosts, int switches)
    : spec_(std::move(spec)), hosts_(hosts), nodes_(hosts + switches), out_(hosts + switches) {}

int Topology::connect(int a, int b, const LinkSpec& spec) {
  const int id = static_cast<int>(links_.size());
  const double f = spec.payload();
  const Link link{a, b, spec.bytes_per_s * f, spec.latency_s, spec.burst_bytes * f,
                  spec.peak_bytes_per_s * f, spec.fifo};
  links_.push_back(link);
  links_.push_back({b, a, link.bytes_per_s, link.latency_s, link.burst_bytes,
                    link.peak_bytes_per_s, link.fifo});
  out_[a].push_back(id);
  out_[b].push_back(id + 1);
  link_of_.emplace(static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b), id);
  link_of_.emplace(static_cast<uint64_t>(b) << 32 | static_cast<uint32_t>(a), id + 1);
  return id;
}

int Topology::link_between(int a, int b) const {
  // A switch's few ports are quicker to scan than a hash is to look up.
  if (out_[a].size() <= 64) {
    for (int l : out_[a])
      if (links_[l].to == b) return l;
    return -1;
  }
  auto it = link_of_.find(static_cast<uint64_t>(a) << 32 | static_cast<uint32_t>(b));
  return it == link_of_.end() ? -1 : it->second;
}

void Topology::check_pair(int src, int dst) const {
  if (src < 0 || src >= hosts_ || dst < 0 || dst >= hosts_ || src == dst)
    throw invalid_usage("sim: no route from host " + std::to_string(src) + " to host " +
                        std::to_string(dst) + " in " + spec_ + " (" + std::to_string(hosts_) +
                        " hosts)");
}

Path Topology::path_through(const std::vector<int>& nodes, double share) const {
  Path p;
  p.share = share;
  for (size_t i = 0; i + 1 < nodes.size(); ++i) {
    const int l = link_between(nodes[i], nodes[i + 1]);
    if (l < 0)
      throw invalid_usage("sim: " + spec_ + " has no link from node " + std::to_string(nodes[i]) +
                          " to node " + std::to_string(nodes[i + 1]) + " (a routing bug)");
    p.links.push_back(l);
  }
  return p;
}

int Topology::diameter_by_search() const {
  int diameter = 0;
  std::vector<int> dist(nodes_);
  for (int s = 0; s < hosts_; ++s) {
    std::fill(dist.begin(), dist.end(), -1);
    std::deque<int> queue{s};
    dist[s] = 0;
    while (!queue.empty()) {
      const int n = queue.front();
      queue.pop_front();
      for (int l : out_[n]) {
        const int m = links_[l].to;
        if (dist[m] >= 0) continue;
        dist[m] = dist[n] + 1;
        queue.push_back(m);
      }
    }
    for (int h = 0; h < hosts_; ++h) diameter = std::max(diameter, dist[h]);
  }
  return diameter;
}

TopologyFacts Topology::facts() const {
  TopologyFacts f;
  f.hosts = hosts_;
  f.switches = switches();
  f.cables = static_cast<int>(links_.size() / 2);
  f.diameter = diameter();
  f.bisection_bytes_per_s = bisection_bytes_per_s();
  f.cables_per_host = static_cast<double>(f.cables) / hosts_;
  int switch_ports = 0;
  for (const Link& l : links_)
    if (l.from >= hosts_) ++switch_ports;
  f.switch_ports_per_host = static_cast<double>(switch_ports) / hosts_;
  return f;
}

}  // namespace plait::sim
