// The k-ary fat tree of data centers (Al-Fares et al., SIGCOMM 2008): k pods, each of k/2
// edge switches (k/2 hosts under each) and k/2 aggregation switches, every edge switch wired
// to every aggregation switch of its pod; (k/2)^2 core switches, core c wired to aggregation
// switch c / (k/2) of every pod. Between hosts of different pods there are (k/2)^2 shortest
// paths (one per core), inside a pod k/2 (one per aggregation switch).
//
// Node ids: hosts, then edge switches (pod-major), aggregation switches, cores.
#include <cstdio>
#include <string>

#include "plait/error.h"
#include "sim/topology.h"

namespace plait::sim {
namespace {

class FatTree final : public Topology {
 public:
  FatTree(int k, double oversub, Ecmp ecmp, LinkSpec link)
      : Topology(spec_of(k, oversub, ecmp, link), k * k * k / 4, k * k + k * k / 4),
        k_(k),
        half_(k / 2),
        oversub_(oversub),
        ecmp_(ecmp),
        link_(link) {
    LinkSpec uplink = link;
    uplink.bytes_per_s = link.bytes_per_s / oversub;
    for (int h = 0; h < hosts(); ++h) connect(h, edge(h / half_), link);
    for (int pod = 0; pod < k_; ++pod)
      for (int e = 0; e < half_; ++e)
        for (int a = 0; a < half_; ++a) connect(edge(pod * half_ + e), agg(pod, a), uplink);
    for (int pod = 0; pod < k_; ++pod)
      for (int a = 0; a < half_; ++a)
        for (int j = 0; j < half_; ++j) connect(agg(pod, a), core(a * half_ + j), link);
  }

  std::vector<Path> route(int src, int dst, uint64_t flow) const override {
    check_pair(src, dst);
    const int se = src / half_, de = dst / half_;  // edge switches (global index)
    if (se == de) return {path_through({src, edge(se), dst})};
    const int sp = se / half_, dp = de / half_;  // pods
    std::vector<Path> paths;
    if (sp == dp) {
      auto via = [&](int a, double share) {
        return path_through({src, edge(se), agg(sp, a), edge(de), dst}, share);
      };
      if (ecmp_ == Ecmp::kPerPacket) {
        for (int a = 0; a < half_; ++a) paths.push_back(via(a, 1.0 / half_));
      } else {
        paths.push_back(via(static_cast<int>(hash(src, dst, flow) % half_), 1.0));
      }
      return paths;
    }
    auto via = [&](int c, double share) {
      const int a = c / half_;
      return path_through({src, edge(se), agg(sp, a), core(c), agg(dp, a), edge(de), dst}, share);
    };
    const int cores = half_ * half_;
    if (ecmp_ == Ecmp::kPerPacket) {
      for (int c = 0; c < cores; ++c) paths.push_back(via(c, 1.0 / cores));
    } else {
      paths.push_back(via(static_cast<int>(hash(src, dst, flow) % cores), 1.0));
    }
    return paths;
  }

  // Up to a core and down again (with k = 2 every host has a pod of its own).
  int diameter() const override { return 6; }
  // Half the hosts send across: the edge uplinks carry it at rate / oversub; the core layer
  // has as much capacity as the hosts.
  double bisection_bytes_per_s() const override {
    return hosts() / 2 * link_.bytes_per_s / oversub_;
  }

 private:
  static std::string spec_of(int k, double oversub, Ecmp ecmp, const LinkSpec& link) {
    std::string s = "fattree:k=" + std::to_string(k);
    if (oversub != 1) {
      char buf[32];
      std::snprintf(buf, sizeof buf, ",oversub=%g", oversub);
      s += buf;
    }
    if (ecmp == Ecmp::kPerPacket) s += ",ecmp=packet";
    return s + "," + describe(link);
  }
  int edge(int e) const { return hosts() + e; }
  int agg(int pod, int a) const { return hosts() + k_ * half_ + pod * half_ + a; }
  int core(int c) const { return hosts() + 2 * k_ * half_ + c; }
  uint64_t hash(int src, int dst, uint64_t flow) const {
    return flow_hash((static_cast<uint64_t>(src) << 40) ^ (static_cast<uint64_t>(dst) << 16) ^
               flow_hash(flow));
  }

  int k_, half_;
  double oversub_;
  Ecmp ecmp_;
  LinkSpec link_;
};

}  // namespace

std::unique_ptr<Topology> make_fat_tree(int k, double oversub, Ecmp ecmp, LinkSpec link) {
  if (k < 2 || k % 2 != 0 || k > 128)
    throw invalid_usage("sim: a fat tree's k is even, from 2 to 128, not " + std::to_string(k));
  if (!(oversub >= 1))
    throw invalid_usage("sim: a fat tree's oversubscription is at least 1, not " +
                        std::to_string(oversub));
  return std::make_unique<FatTree>(k, oversub, ecmp, link);
}

}  // namespace plait::sim
