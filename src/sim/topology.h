// The networks `plait sim` replays schedules on: hosts and switches joined by links with a
// rate and a latency, and the routing that maps a flow between two hosts onto links.
//
// A cable is two directed links, one per direction, each with the cable's full rate (full
// duplex, as Ethernet and InfiniBand are). Node ids: hosts first (0 .. hosts()-1), then
// switches. In the direct networks (ring, mesh, torus) the hosts forward for each other; in
// the switched ones (star, fat tree, dragonfly) they hang off switches.
//
// Routing returns one or more paths per flow, each with the share of the flow's bytes it
// carries: one path for deterministic and per-flow-hashed routing, every equal-cost path in
// equal shares for per-packet spraying.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace plait::sim {

struct LinkSpec {
  double bytes_per_s = 1.25e8;  // 1 Gbit/s
  double latency_s = 1e-6;      // per hop: wire, serialization start, switching
  // A token-bucket shaper on the link (Linux TBF, as the namespace testbed caps its links):
  // up to burst_bytes pass at peak_bytes_per_s before the link falls back to its rate. 0: none.
  double burst_bytes = 0;
  double peak_bytes_per_s = 0;
  // Frames of this MTU carry TCP/IPv4 (timestamps on) over Ethernet: of the mtu + 14 bytes a
  // shaper counts per frame (tc counts the Ethernet header), mtu - 52 are a message's. The
  // rate, burst and peak are the wire's; the links carry payload at payload() of them. 0: the
  // rate is payload already.
  int mtu = 0;
  double payload() const { return mtu > 0 ? (mtu - 52.0) / (mtu + 14.0) : 1.0; }
  // How a host's link to its network serves the messages its ranks post at once. false: they
  // share it max-min (a NIC's queue pairs, a fair-queueing qdisc). true: in posting order, each
  // taking what the one before leaves (a FIFO qdisc, such as TBF's, that TCP streams with open
  // windows fill a message at a time: the testbed's links; replay.h).
  bool fifo = false;
};

// "rate=1gbit,latency=20us": a link's spec as parse_topology() reads it.
std::string describe(const LinkSpec& link);

struct Link {
  int from = -1;
  int to = -1;
  double bytes_per_s = 0;
  double latency_s = 0;
  double burst_bytes = 0;       // LinkSpec's shaper
  double peak_bytes_per_s = 0;
  bool fifo = false;            // LinkSpec::fifo
};

struct Path {
  std::vector<int> links;  // link ids, from the source host to the destination host
  double share = 1.0;      // fraction of the flow's bytes on this path
};

// What the notes tabulate for a topology.
struct TopologyFacts {
  int hosts = 0;
  int switches = 0;
  int cables = 0;                   // undirected; host-to-switch cables included
  int diameter = 0;                 // hops of the longest shortest path between two hosts
  double bisection_bytes_per_s = 0; // one direction, across the worst balanced host split
  double cables_per_host = 0;       // the cost per node the notes compare: links bought per host
  double switch_ports_per_host = 0; // switch ports bought per host (0 for direct networks)
};

class Topology {
 public:
  virtual ~Topology() = default;

  // "torus:dims=4x4,rate=1gbit,latency=20us": the spec it was made from, normalized.
  const std::string& spec() const { return spec_; }
  int hosts() const { return hosts_; }
  int nodes() const { return nodes_; }
  int switches() const { return nodes_ - hosts_; }
  const std::vector<Link>& links() const { return links_; }
  // Link ids leaving `node`.
  const std::vector<int>& out_links(int node) const { return out_[node]; }
  // The link from `a` to `b` (adjacent nodes), or -1.
  int link_between(int a, int b) const;

  // The paths of flow `flow` (any number: a hash input for ECMP and Valiant) from host `src`
  // to host `dst` (src != dst). Throws kInvalidUsage for hosts out of range.
  virtual std::vector<Path> route(int src, int dst, uint64_t flow) const = 0;

  // Node and cable counts, and the family's closed forms for diameter and bisection (a search
  // over a 27,648-host fat tree takes seconds; tests check the closed forms against searches
  // on small instances).
  TopologyFacts facts() const;
  // Hops between the two farthest hosts, by breadth-first search from every host.
  int diameter_by_search() const;
  // The family's closed forms: hops between the two farthest hosts, and bisection bandwidth
  // (one direction, across the worst balanced split of the hosts).
  virtual int diameter() const = 0;
  virtual double bisection_bytes_per_s() const = 0;

 protected:
  Topology(std::string spec, int hosts, int switches);
  // A cable: two directed links. Returns the id of the a->b link (b->a is the next id).
  int connect(int a, int b, const LinkSpec& spec);
  // Hosts in range and distinct, or throws naming the topology.
  void check_pair(int src, int dst) const;
  // The path along a node sequence (adjacent nodes).
  Path path_through(const std::vector<int>& nodes, double share = 1.0) const;

 private:
  std::string spec_;
  int hosts_ = 0;
  int nodes_ = 0;
  std::vector<Link> links_;
  std::vector<std::vector<int>> out_;
  // (a << 32 | b) -> the first link from a to b, for nodes of many ports (a star's switch has
  // one per host, and a route asks for a link at every hop).
  std::unordered_map<uint64_t, int> link_of_;
};

// A well-mixed 64-bit hash (splitmix64's finalizer): which of the equal-cost paths (ECMP) or
// which intermediate group (Valiant) a flow takes.
inline uint64_t flow_hash(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// ECMP choice: per flow, one hashed path; per packet, the flow sprayed over every path.
enum class Ecmp : uint8_t { kPerFlow, kPerPacket };
// Dragonfly routing: minimal (local, global, local) or Valiant (minimal to a random
// intermediate group, then minimal to the destination).
enum class DragonflyRouting : uint8_t { kMinimal, kValiant };
enum class DragonflyArrangement : uint8_t { kAbsolute, kCirculant };

std::unique_ptr<Topology> make_ring(int hosts, LinkSpec link);
std::unique_ptr<Topology> make_mesh(int hosts, LinkSpec link);
// dims: 2 or 3 sizes, each >= 2; dimension-order routing, the shorter way round each ring.
std::unique_ptr<Topology> make_torus(std::vector<int> dims, LinkSpec link);
// Every host on one non-blocking switch (the network-namespace testbed's bridge).
std::unique_ptr<Topology> make_star(int hosts, LinkSpec link);
// k-ary fat tree (k even, >= 2): k pods of k/2 edge and k/2 aggregation switches, (k/2)^2
// cores, k^3/4 hosts. `oversub` >= 1 divides the rate of the edge switches' uplinks.
std::unique_ptr<Topology> make_fat_tree(int k, double oversub, Ecmp ecmp, LinkSpec link);
// Dragonfly: groups of `a` routers, fully connected inside; `p` hosts per router; `h` global
// links per router; a*h + 1 groups, one global link between every pair of groups.
std::unique_ptr<Topology> make_dragonfly(int a, int p, int h, DragonflyArrangement arrangement,
                                         DragonflyRouting routing, LinkSpec link);

}  // namespace plait::sim
