// The dragonfly (Kim, Dally, Scott, Abts, ISCA 2008): groups of `a` routers joined all to
// all by local links, `p` hosts on every router, `h` global links on every router, and
// g = a*h + 1 groups, so that every pair of groups has exactly one global link.
//
// Which router of a group holds the global link to which group is the global arrangement:
//   absolute   group i's global ports, numbered t = router*h + port, go to the groups other
//              than i in increasing order (t < i: group t, else group t + 1)
//   circulant  port t of group i goes to group (i + t + 1) mod g
// Routing: minimal is local hop (to the router holding the global link), global hop, local
// hop (to the destination's router); Valiant goes minimally to an intermediate group picked
// by the flow's hash, then minimally to the destination (spreads adversarial traffic over
// every global link, at up to twice the global hops).
//
// Node ids: hosts (router-major, p per router), then routers (group-major).
#include <algorithm>
#include <string>

#include "plait/error.h"
#include "sim/topology.h"

namespace plait::sim {
namespace {

class Dragonfly final : public Topology {
 public:
  Dragonfly(int a, int p, int h, DragonflyArrangement arrangement, DragonflyRouting routing,
            LinkSpec link)
      : Topology(spec_of(a, p, h, arrangement, routing, link), (a * h + 1) * a * p,
                 (a * h + 1) * a),
        a_(a),
        p_(p),
        h_(h),
        g_(a * h + 1),
        arrangement_(arrangement),
        routing_(routing),
        link_(link) {
    for (int host = 0; host < hosts(); ++host) connect(host, router(host / p_), link);
    for (int grp = 0; grp < g_; ++grp)
      for (int r = 0; r < a_; ++r)
        for (int s = r + 1; s < a_; ++s) connect(router(grp * a_ + r), router(grp * a_ + s), link);
    for (int grp = 0; grp < g_; ++grp)
      for (int t = 0; t < a_ * h_; ++t) {
        const int other = group_of_port(grp, t);
        if (other < grp) continue;  // wired from the lower group's side
        connect(router(grp * a_ + t / h_), router(other * a_ + port_to(other, grp) / h_), link);
      }
  }

  std::vector<Path> route(int src, int dst, uint64_t flow) const override {
    check_pair(src, dst);
    const int sr = src / p_, dr = dst / p_;  // routers (global index)
    std::vector<int> nodes{src, router(sr)};
    if (routing_ == DragonflyRouting::kValiant && sr / a_ != dr / a_) {
      // An intermediate group other than the source's and the destination's.
      const int sg = sr / a_, dg = dr / a_;
      int mid = static_cast<int>(flow_hash(flow_hash(flow) ^ (static_cast<uint64_t>(src) << 32) ^ dst) %
                                 static_cast<uint64_t>(g_ - 2));
      for (int skip : {std::min(sg, dg), std::max(sg, dg)})
        if (mid >= skip) ++mid;
      // Into the intermediate group at the router its global link lands on, then onwards.
      const int entry = mid * a_ + port_to(mid, sg) / h_;
      minimal(sr, entry, &nodes);
      minimal(entry, dr, &nodes);
    } else {
      minimal(sr, dr, &nodes);
    }
    nodes.push_back(dst);
    return {path_through(nodes)};
  }

  // Host link, then local, global, local (a router of one group holds no global link to the
  // router it must reach in another), then host link; with one router per group, no local.
  int diameter() const override { return a_ == 1 ? 3 : 5; }
  // Split the groups in halves: the global links between them cross; every local and host
  // link stays on one side. With one link per pair of groups: floor(g/2) * ceil(g/2) links,
  // unless the hosts' own links of half the hosts are fewer (few hosts per group).
  double bisection_bytes_per_s() const override {
    const double global = static_cast<double>(g_ / 2) * (g_ - g_ / 2);
    return std::min(global, static_cast<double>(hosts() / 2)) * link_.bytes_per_s;
  }

 private:
  static std::string spec_of(int a, int p, int h, DragonflyArrangement arrangement,
                             DragonflyRouting routing, const LinkSpec& link) {
    std::string s = "dragonfly:a=" + std::to_string(a) + ",p=" + std::to_string(p) +
                    ",h=" + std::to_string(h);
    if (arrangement == DragonflyArrangement::kCirculant) s += ",arrangement=circulant";
    if (routing == DragonflyRouting::kValiant) s += ",routing=valiant";
    return s + "," + describe(link);
  }
  int router(int r) const { return hosts() + r; }
  // The group that global port t of group `grp` reaches.
  int group_of_port(int grp, int t) const {
    if (arrangement_ == DragonflyArrangement::kCirculant) return (grp + t + 1) % g_;
    return t < grp ? t : t + 1;
  }
  // The global port of group `grp` that reaches group `other`.
  int port_to(int grp, int other) const {
    if (arrangement_ == DragonflyArrangement::kCirculant) return ((other - grp - 1) % g_ + g_) % g_;
    return other < grp ? other : other - 1;
  }
  // Appends the routers after `from` on the minimal path to router `to` (both global router
  // indices): local, global, local, each only where needed.
  void minimal(int from, int to, std::vector<int>* nodes) const {
    const int fg = from / a_, tg = to / a_;
    int at = from;
    auto hop = [&](int next) {
      if (next == at) return;
      nodes->push_back(router(next));
      at = next;
    };
    if (fg != tg) {
      hop(fg * a_ + port_to(fg, tg) / h_);  // the router holding the global link
      hop(tg * a_ + port_to(tg, fg) / h_);  // across it
    }
    hop(to);
  }

  int a_, p_, h_, g_;
  DragonflyArrangement arrangement_;
  DragonflyRouting routing_;
  LinkSpec link_;
};

}  // namespace

std::unique_ptr<Topology> make_dragonfly(int a, int p, int h, DragonflyArrangement arrangement,
                                         DragonflyRouting routing, LinkSpec link) {
  if (a < 1 || p < 1 || h < 1)
    throw invalid_usage("sim: a dragonfly needs a, p and h of at least 1 (a=" + std::to_string(a) +
                        ", p=" + std::to_string(p) + ", h=" + std::to_string(h) + ")");
  const long long hosts = static_cast<long long>(a) * h + 1;
  if (hosts * a * p > (1 << 22))
    throw invalid_usage("sim: a dragonfly of a=" + std::to_string(a) + ", p=" + std::to_string(p) +
                        ", h=" + std::to_string(h) + " has more than 4M hosts");
  if (routing == DragonflyRouting::kValiant && a * h + 1 < 3)
    throw invalid_usage("sim: Valiant routing needs at least 3 groups (a*h + 1 >= 3)");
  return std::make_unique<Dragonfly>(a, p, h, arrangement, routing, link);
}

}  // namespace plait::sim
