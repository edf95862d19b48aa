// Networks without switches, where every host forwards for the others (ring, full mesh,
// torus), and the star: every host on one non-blocking switch.
#include <algorithm>
#include <numeric>

#include "plait/error.h"
#include "sim/topology.h"

namespace plait::sim {
namespace {

// Hops and direction (+1 / -1) the shorter way round a ring of n from a to b; a tie (n even,
// opposite nodes) goes the positive way.
std::pair<int, int> ring_steps(int a, int b, int n) {
  const int forward = ((b - a) % n + n) % n;
  return forward <= n - forward ? std::pair{forward, 1} : std::pair{n - forward, -1};
}

class Ring final : public Topology {
 public:
  Ring(int n, LinkSpec link)
      : Topology("ring:hosts=" + std::to_string(n) + "," + describe(link), n, 0), link_(link) {
    if (n == 2) {
      connect(0, 1, link);  // one cable: a ring of two is a pair
      return;
    }
    for (int h = 0; h < n; ++h) connect(h, (h + 1) % n, link);
  }
  std::vector<Path> route(int src, int dst, uint64_t) const override {
    check_pair(src, dst);
    const auto [hops, dir] = ring_steps(src, dst, hosts());
    std::vector<int> nodes{src};
    for (int i = 0; i < hops; ++i) nodes.push_back(((nodes.back() + dir) % hosts() + hosts()) % hosts());
    return {path_through(nodes)};
  }
  int diameter() const override { return hosts() / 2; }
  double bisection_bytes_per_s() const override {
    return hosts() == 2 ? link_.bytes_per_s : 2 * link_.bytes_per_s;
  }

 private:
  LinkSpec link_;
};

class Mesh final : public Topology {
 public:
  Mesh(int n, LinkSpec link)
      : Topology("mesh:hosts=" + std::to_string(n) + "," + describe(link), n, 0), link_(link) {
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) connect(a, b, link);
  }
  std::vector<Path> route(int src, int dst, uint64_t) const override {
    check_pair(src, dst);
    return {path_through({src, dst})};
  }
  int diameter() const override { return 1; }
  double bisection_bytes_per_s() const override {
    const double half = hosts() / 2, rest = hosts() - hosts() / 2;
    return half * rest * link_.bytes_per_s;
  }

 private:
  LinkSpec link_;
};

class Torus final : public Topology {
 public:
  Torus(std::vector<int> dims, LinkSpec link)
      : Topology(spec_of(dims, link), product(dims), 0), dims_(std::move(dims)), link_(link) {
    for (int h = 0; h < hosts(); ++h) {
      std::vector<int> c = coords(h);
      for (size_t d = 0; d < dims_.size(); ++d) {
        if (dims_[d] == 2 && c[d] == 1) continue;  // a ring of two is one cable
        std::vector<int> next = c;
        next[d] = (c[d] + 1) % dims_[d];
        connect(h, index(next), link);
      }
    }
  }
  // Dimension order: all of the first dimension's hops, then the second's, then the third's.
  std::vector<Path> route(int src, int dst, uint64_t) const override {
    check_pair(src, dst);
    std::vector<int> c = coords(src);
    const std::vector<int> target = coords(dst);
    std::vector<int> nodes{src};
    for (size_t d = 0; d < dims_.size(); ++d) {
      const auto [hops, dir] = ring_steps(c[d], target[d], dims_[d]);
      for (int i = 0; i < hops; ++i) {
        c[d] = ((c[d] + dir) % dims_[d] + dims_[d]) % dims_[d];
        nodes.push_back(index(c));
      }
    }
    return {path_through(nodes)};
  }
  int diameter() const override {
    int hops = 0;
    for (int d : dims_) hops += d / 2;
    return hops;
  }
  // Cut across the longest dimension: every ring along it crosses the cut twice (once when it
  // has only two nodes); the rings along it are the product of the other dimensions.
  double bisection_bytes_per_s() const override {
    const auto longest = std::max_element(dims_.begin(), dims_.end());
    const int rings = hosts() / *longest;
    return rings * (*longest == 2 ? 1 : 2) * link_.bytes_per_s;
  }

 private:
  static int product(const std::vector<int>& dims) {
    return std::accumulate(dims.begin(), dims.end(), 1, std::multiplies<>());
  }
  static std::string spec_of(const std::vector<int>& dims, const LinkSpec& link) {
    std::string s = "torus:dims=";
    for (size_t d = 0; d < dims.size(); ++d) {
      if (d > 0) s += 'x';
      s += std::to_string(dims[d]);
    }
    return s + "," + describe(link);
  }
  std::vector<int> coords(int h) const {
    std::vector<int> c(dims_.size());
    for (size_t d = 0; d < dims_.size(); ++d) {
      c[d] = h % dims_[d];
      h /= dims_[d];
    }
    return c;
  }
  int index(const std::vector<int>& c) const {
    int h = 0;
    for (size_t d = dims_.size(); d-- > 0;) h = h * dims_[d] + c[d];
    return h;
  }

  std::vector<int> dims_;
  LinkSpec link_;
};

class Star final : public Topology {
 public:
  Star(int n, LinkSpec link)
      : Topology("star:hosts=" + std::to_string(n) + "," + describe(link), n, 1), link_(link) {
    for (int h = 0; h < n; ++h) connect(h, n, link);
  }
  std::vector<Path> route(int src, int dst, uint64_t) const override {
    check_pair(src, dst);
    return {path_through({src, hosts(), dst})};
  }
  int diameter() const override { return 2; }
  double bisection_bytes_per_s() const override { return (hosts() / 2) * link_.bytes_per_s; }

 private:
  LinkSpec link_;
};

void check_hosts(int n, int at_least, const char* family) {
  if (n < at_least)
    throw invalid_usage(std::string("sim: a ") + family + " needs at least " +
                        std::to_string(at_least) + " hosts, not " + std::to_string(n));
}

}  // namespace

std::unique_ptr<Topology> make_ring(int hosts, LinkSpec link) {
  check_hosts(hosts, 2, "ring");
  return std::make_unique<Ring>(hosts, link);
}

std::unique_ptr<Topology> make_mesh(int hosts, LinkSpec link) {
  check_hosts(hosts, 2, "mesh");
  return std::make_unique<Mesh>(hosts, link);
}

std::unique_ptr<Topology> make_torus(std::vector<int> dims, LinkSpec link) {
  if (dims.size() != 2 && dims.size() != 3)
    throw invalid_usage("sim: a torus has 2 or 3 dimensions (dims=AxB or AxBxC), not " +
                        std::to_string(dims.size()));
  for (int d : dims)
    if (d < 2) throw invalid_usage("sim: every torus dimension needs at least 2 hosts, not " + std::to_string(d));
  return std::make_unique<Torus>(std::move(dims), link);
}

std::unique_ptr<Topology> make_star(int hosts, LinkSpec link) {
  check_hosts(hosts, 2, "star");
  return std::make_unique<Star>(hosts, link);
}

}  // namespace plait::sim
