// The simulator's topologies: facts against brute force on small instances (diameter by
// search, bisection by a max-flow over every balanced split of the hosts), routing that
// reaches its target along minimal paths where the family's routing is minimal, and specs.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <set>

#include "plait/error.h"
#include "sim/topology.h"
#include "sim/topology_spec.h"

namespace plait::sim {
namespace {

// Max flow (Edmonds-Karp) from the hosts in `side` to the others, every link with its
// capacity: the capacity of the cheapest cut that separates the two host sets, switches
// placed wherever the cut is cheapest.
double min_cut(const Topology& t, const std::vector<bool>& side) {
  const int n = t.nodes() + 2, source = n - 2, sink = n - 1;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> cap(n, std::vector<double>(n, 0));
  for (const Link& l : t.links()) cap[l.from][l.to] += l.bytes_per_s;
  for (int h = 0; h < t.hosts(); ++h) {
    if (side[h]) cap[source][h] = kInf;
    else cap[h][sink] = kInf;
  }
  double flow = 0;
  for (;;) {
    std::vector<int> parent(n, -1);
    parent[source] = source;
    std::deque<int> queue{source};
    while (!queue.empty() && parent[sink] < 0) {
      const int u = queue.front();
      queue.pop_front();
      for (int v = 0; v < n; ++v)
        if (parent[v] < 0 && cap[u][v] > 1e-9) {
          parent[v] = u;
          queue.push_back(v);
        }
    }
    if (parent[sink] < 0) return flow;
    double push = kInf;
    for (int v = sink; v != source; v = parent[v]) push = std::min(push, cap[parent[v]][v]);
    for (int v = sink; v != source; v = parent[v]) {
      cap[parent[v]][v] -= push;
      cap[v][parent[v]] += push;
    }
    flow += push;
  }
}

// The worst balanced split of the hosts (sizes floor and ceil of half).
double brute_force_bisection(const Topology& t) {
  const int hosts = t.hosts();
  double best = std::numeric_limits<double>::infinity();
  std::vector<bool> side(hosts, false);
  // Host 0 on the first side: each split once.
  std::function<void(int, int)> choose = [&](int next, int left) {
    if (left == 0) {
      best = std::min(best, min_cut(t, side));
      return;
    }
    for (int h = next; h <= hosts - left; ++h) {
      side[h] = true;
      choose(h + 1, left - 1);
      side[h] = false;
    }
  };
  side[0] = true;
  choose(1, hosts / 2 - 1);
  return best;
}

constexpr double kRate = 1.25e8;  // the default 1gbit

struct Case {
  std::string spec;
  int hosts;
  int diameter;
};

class TopologyFactsTest : public ::testing::TestWithParam<Case> {};

TEST_P(TopologyFactsTest, MatchBruteForce) {
  const Case& c = GetParam();
  auto t = parse_topology(c.spec);
  const TopologyFacts f = t->facts();
  EXPECT_EQ(f.hosts, c.hosts);
  EXPECT_EQ(f.diameter, c.diameter);
  EXPECT_EQ(t->diameter_by_search(), c.diameter);
  EXPECT_NEAR(f.bisection_bytes_per_s, brute_force_bisection(*t), 1e-3 * kRate) << c.spec;
}

INSTANTIATE_TEST_SUITE_P(
    Small, TopologyFactsTest,
    ::testing::Values(Case{"ring:hosts=2", 2, 1}, Case{"ring:hosts=8", 8, 4},
                      Case{"mesh:hosts=6", 6, 1}, Case{"star:hosts=8", 8, 2},
                      Case{"torus:dims=4x4", 16, 4}, Case{"torus:dims=4x2", 8, 3},
                      Case{"torus:dims=2x2x2", 8, 3}, Case{"torus:dims=4x2x2", 16, 4},
                      Case{"fattree:k=2", 2, 6}, Case{"fattree:k=4", 16, 6},
                      Case{"fattree:k=4,oversub=2", 16, 6},
                      Case{"dragonfly:a=2,p=1,h=1", 6, 5},
                      Case{"dragonfly:a=2,p=2,h=1", 12, 5},
                      Case{"dragonfly:a=1,p=2,h=3", 8, 3}, Case{"dragonfly:a=1,p=1,h=3", 4, 3},
                      Case{"dragonfly:a=2,p=1,h=2", 10, 5}, Case{"dragonfly:a=3,p=1,h=1", 12, 5},
                      Case{"dragonfly:a=2,p=1,h=3", 14, 5},
                      Case{"dragonfly:a=2,p=1,h=2,arrangement=circulant", 10, 5}),
    [](const auto& info) {
      std::string name = info.param.spec;
      for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return name;
    });

// Every path of every pair: starts at the source, chains link to link, ends at the target;
// shares sum to one. Returns the hop count of the longest path.
void expect_routes_reach(const Topology& t, uint64_t flows, bool minimal) {
  // Shortest hop counts, for the minimal check.
  std::vector<std::vector<int>> dist(t.hosts(), std::vector<int>(t.nodes(), -1));
  for (int s = 0; s < t.hosts(); ++s) {
    std::deque<int> queue{s};
    dist[s][s] = 0;
    while (!queue.empty()) {
      const int u = queue.front();
      queue.pop_front();
      for (int l : t.out_links(u))
        if (dist[s][t.links()[l].to] < 0) {
          dist[s][t.links()[l].to] = dist[s][u] + 1;
          queue.push_back(t.links()[l].to);
        }
    }
  }
  for (int s = 0; s < t.hosts(); ++s)
    for (int d = 0; d < t.hosts(); ++d) {
      if (s == d) continue;
      for (uint64_t flow = 0; flow < flows; ++flow) {
        double shares = 0;
        for (const Path& p : t.route(s, d, flow)) {
          ASSERT_FALSE(p.links.empty());
          int at = s;
          for (int l : p.links) {
            ASSERT_EQ(t.links()[l].from, at) << t.spec() << " " << s << "->" << d;
            at = t.links()[l].to;
          }
          EXPECT_EQ(at, d) << t.spec();
          if (minimal) {
            EXPECT_EQ(static_cast<int>(p.links.size()), dist[s][d]) << t.spec();
          }
          shares += p.share;
        }
        EXPECT_NEAR(shares, 1.0, 1e-9) << t.spec();
      }
    }
}

TEST(TopologyRouting, MinimalFamiliesTakeShortestPaths) {
  for (const char* spec :
       {"ring:hosts=7", "ring:hosts=8", "mesh:hosts=5", "star:hosts=5", "torus:dims=5x4",
        "torus:dims=3x4x2", "fattree:k=4", "fattree:k=4,ecmp=packet", "fattree:k=6"})
    expect_routes_reach(*parse_topology(spec), 3, true);
}

// Global links a path crosses: those between routers of different groups.
int global_hops(const Topology& t, const Path& p, int a) {
  int n = 0;
  for (int l : p.links) {
    const Link& link = t.links()[l];
    if (link.from >= t.hosts() && link.to >= t.hosts() &&
        (link.from - t.hosts()) / a != (link.to - t.hosts()) / a)
      ++n;
  }
  return n;
}

TEST(TopologyRouting, DragonflyMinimalAndValiant) {
  for (const char* arrangement : {"absolute", "circulant"}) {
    const std::string base = std::string("dragonfly:a=4,p=2,h=2,arrangement=") + arrangement;
    auto minimal = parse_topology(base);
    auto valiant = parse_topology(base + ",routing=valiant");
    expect_routes_reach(*minimal, 2, false);
    expect_routes_reach(*valiant, 2, false);
    std::set<int> intermediate_links;
    for (int s = 0; s < minimal->hosts(); ++s)
      for (int d = 0; d < minimal->hosts(); ++d) {
        if (s == d) continue;
        const Path m = minimal->route(s, d, 0)[0];
        const bool same_group = s / 8 == d / 8;  // a * p hosts per group
        EXPECT_EQ(global_hops(*minimal, m, 4), same_group ? 0 : 1) << base << " " << s << "->" << d;
        EXPECT_LE(m.links.size(), 5u);
        for (uint64_t flow = 0; flow < 4; ++flow) {
          const Path v = valiant->route(s, d, flow)[0];
          EXPECT_EQ(global_hops(*valiant, v, 4), same_group ? 0 : 2) << base;
          EXPECT_LE(v.links.size(), 8u);
          for (int l : v.links) intermediate_links.insert(l);
        }
      }
    // Valiant spreads over (nearly) every global link; minimal uses one per group pair.
    EXPECT_GT(intermediate_links.size(), minimal->links().size() * 3 / 4) << base;
  }
}

TEST(TopologyRouting, PerFlowEcmpSpreadsFlowsAndSprayingSplitsThem) {
  auto flow = parse_topology("fattree:k=4");
  std::set<std::vector<int>> paths;
  for (uint64_t f = 0; f < 64; ++f) paths.insert(flow->route(0, 15, f)[0].links);
  EXPECT_GE(paths.size(), 3u);  // of 4 cores
  auto packet = parse_topology("fattree:k=4,ecmp=packet");
  EXPECT_EQ(packet->route(0, 15, 0).size(), 4u);  // one per core
  EXPECT_EQ(packet->route(0, 2, 0).size(), 2u);   // same pod: one per aggregation switch
  EXPECT_EQ(packet->route(0, 1, 0).size(), 1u);   // same edge switch
}

TEST(TopologySpec, ReadsRatesLatenciesAndEveryFamily) {
  EXPECT_DOUBLE_EQ(parse_rate("1gbit", "rate="), 1.25e8);
  EXPECT_DOUBLE_EQ(parse_rate("200mbit", "rate="), 2.5e7);
  EXPECT_DOUBLE_EQ(parse_latency("20us", "latency="), 2e-5);
  EXPECT_DOUBLE_EQ(parse_latency("500ns", "latency="), 5e-7);
  EXPECT_DOUBLE_EQ(parse_latency("0us", "latency="), 0);  // the alpha may hold the path's
  auto t = parse_topology("star:hosts=4,rate=200mbit,latency=20us");
  EXPECT_EQ(t->hosts(), 4);
  EXPECT_DOUBLE_EQ(t->links()[0].bytes_per_s, 2.5e7);
  EXPECT_DOUBLE_EQ(t->links()[0].latency_s, 2e-5);
  EXPECT_EQ(t->spec(), "star:hosts=4,rate=200mbit,latency=20us");
  EXPECT_EQ(parse_topology("fattree:k=8")->hosts(), 128);
  EXPECT_EQ(parse_topology("fattree:k=4,oversub=4")->facts().bisection_bytes_per_s, 2 * kRate);
  EXPECT_EQ(parse_topology("dragonfly:a=4,p=2,h=2")->hosts(), 9 * 4 * 2);
  EXPECT_EQ(parse_topology("torus:dims=8x8x8")->hosts(), 512);
}

// mtu=: the rate counts whole frames as tc does (Ethernet header included); a message's bytes
// are the TCP payload of each: 1448 of 1514 at MTU 1500, and the shaper's burst likewise.
TEST(TopologySpec, MtuLeavesMessagesThePayloadOfEachFrame) {
  auto t = parse_topology("star:hosts=2,rate=1gbit,burst=512kb,mtu=1500");
  EXPECT_DOUBLE_EQ(t->links()[0].bytes_per_s, 1.25e8 * 1448 / 1514);
  EXPECT_DOUBLE_EQ(t->links()[0].burst_bytes, 524288.0 * 1448 / 1514);
  EXPECT_DOUBLE_EQ(t->links()[0].peak_bytes_per_s, 1.25e9 * 1448 / 1514);
  EXPECT_EQ(t->spec(), "star:hosts=2,rate=1gbit,latency=1us,burst=512kb,peak=10gbit,mtu=1500");
  EXPECT_DOUBLE_EQ(parse_topology("star:hosts=2,mtu=9000")->links()[0].bytes_per_s,
                   1.25e8 * 8948 / 9014);
}

TEST(TopologySpec, QueueSaysHowAHostsLinkServesItsMessages) {
  auto fifo = parse_topology("star:hosts=2,queue=fifo");
  EXPECT_TRUE(fifo->links()[0].fifo);
  EXPECT_TRUE(fifo->links()[1].fifo);
  EXPECT_EQ(fifo->spec(), "star:hosts=2,rate=1gbit,latency=1us,queue=fifo");
  EXPECT_FALSE(parse_topology("star:hosts=2,queue=fair")->links()[0].fifo);
  EXPECT_FALSE(parse_topology("star:hosts=2")->links()[0].fifo);
}

TEST(TopologySpec, BadSpecsNameTheirMistake) {
  auto refused = [](const char* spec, const char* says) {
    try {
      parse_topology(spec);
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage) << spec;
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << spec << ": " << e.what();
      return;
    }
    ADD_FAILURE() << spec << " was accepted";
  };
  refused("hypercube:hosts=8", "unknown topology 'hypercube'");
  refused("ring", "needs hosts=");
  refused("ring:hosts=1", "at least 2 hosts");
  refused("ring:hosts=4,speed=1gbit", "no key 'speed'");
  refused("ring:hosts=4,rate=1gbps", "rate= takes a rate");
  refused("ring:hosts=4,latency=5", "latency= takes a time");
  refused("torus:dims=4", "2 or 3 dimensions");
  refused("torus:dims=4x1", "at least 2 hosts");
  refused("fattree:k=5", "even");
  refused("fattree:k=4,oversub=0.5", "at least 1");
  refused("fattree:k=4,ecmp=random", "ecmp=");
  refused("dragonfly:a=2,p=1", "needs h=");
  refused("dragonfly:a=2,p=1,h=1,routing=ugal", "routing=");
  refused("mesh:hosts=4,hosts=5", "given twice");
  refused("star:hosts", "not key=value");
  refused("star:hosts=2,mtu=100", "mtu= is 576 to 65535");
  refused("star:hosts=2,queue=lifo", "queue= is fifo or fair");
  auto t = parse_topology("ring:hosts=4");
  EXPECT_THROW(t->route(0, 0, 0), Error);
  EXPECT_THROW(t->route(0, 4, 0), Error);
}

}  // namespace
}  // namespace plait::sim
