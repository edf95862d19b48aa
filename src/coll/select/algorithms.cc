// The registry: one row per (collective, algorithm), with its builder and its cost under
// the alpha-beta-gamma model (Thakur, Rabenseifner & Gropp, "Optimization of Collective
// Communication Operations in MPICH", 2005). A transfer of b bytes costs a + b*B, reducing b
// bytes b*G, copying b bytes b*C (a = alpha, B = 1/beta, G = 1/gamma, C = 1/copy rate).
// Each formula is the time on the critical path, with every rank's link full duplex and
// messages to different peers sharing that one link.
//
// Chunking: a transfer cut into k chunks pays k latencies; only where the algorithm is a
// pipeline (the chain broadcast) does chunking also shorten the critical path, from
// depth*(a + m*B) to (depth + k - 1)*(a + (m/k)*B). Elsewhere the model charges chunking
// its latency and nothing else: its gain, overlapping reductions with transfers, is at most
// the gamma term and is left out so as not to flatter it. The double binary tree, a
// pipeline too, is credited its overlap the same way the chain broadcast is.
//
// Hosts: on a call whose host_of spans hosts, Model charges flat algorithms the inter-host
// link (CostParams::across_hosts); the hierarchical formula costs each of its levels on
// its own link (algorithms.h says why).
#include "coll/select/algorithms.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "coll/schedule/builder.h"
#include "coll/schedule/hosts.h"
#include "coll/segment/segment_cost.h"
#include "coll/select/builders.h"
#include "coll/select/host_rounds.h"

namespace plait::coll {
namespace {

// What every formula needs, from the call's shape and the machine's parameters.
struct Model {
  double a, B, G, C;
  double n;      // ranks
  double L;      // ceil(log2 n): rounds of a binomial tree or dissemination
  double lp2;    // log2(p2), p2 = floor_pow2(n): rounds of halving or doubling
  double p2;
  bool fold;     // n is not a power of two: the pre/post step of halving/doubling
  double esz;    // bytes per element
  size_t chunk;  // elements, 0 = unchunked

  Model(const CollArgs& args, const CostParams& params)
      : Model(spans_hosts(args) ? params.across_hosts() : params, args) {}
  // `p` already holds the link the call's transfers are charged.
  Model(const CostParams& p, const CollArgs& args)
      : a(p.alpha_us),
        B(1.0 / p.beta_bytes_per_us),
        G(1.0 / p.gamma_bytes_per_us),
        C(1.0 / p.copy_bytes_per_us),
        n(args.size),
        L(ceil_log2(args.size)),
        lp2(std::log2(floor_pow2(args.size))),
        p2(floor_pow2(args.size)),
        fold(!is_pow2(args.size)),
        esz(static_cast<double>(dtype_size(args.dtype))),
        chunk(args.chunk_count) {}

  // Messages one transfer of `bytes` is cut into.
  double pieces(double bytes) const {
    if (chunk == 0 || bytes <= 0) return 1;
    return std::max(1.0, std::ceil(bytes / (static_cast<double>(chunk) * esz)));
  }
  // What each round of recursive halving moves: m/2, m/4, ..., m/p2.
  std::vector<double> halves(double m) const {
    std::vector<double> parts;
    for (double k = 2; k <= p2; k *= 2) parts.push_back(m / k);
    return parts;
  }
  // One transfer of `bytes`, with its chunk latencies.
  double xfer(double bytes) const { return pieces(bytes) * a + bytes * B; }
};

// Bytes per rank of the "natural" message: the vector for allreduce/reduce/broadcast, one
// rank's block for the gather/scatter family (the average block for v-variants).
double bytes_of(const CollArgs& args) {
  double elems = static_cast<double>(args.count);
  if (!args.counts.empty()) {
    double total = 0;
    for (size_t c : args.counts) total += static_cast<double>(c);
    elems = total / static_cast<double>(args.counts.size());
  }
  return elems * static_cast<double>(dtype_size(args.dtype));
}

// The fold's cost for a vector of m bytes: hand over m, reduce it, hand back the result.
double fold_cost(const Model& x, double m, bool back) {
  if (!x.fold) return 0;
  return x.xfer(m) + m * x.G + (back ? x.xfer(m) : 0);
}

// ---- allreduce (m = vector bytes) ----
double allreduce_naive(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args);
  return (x.n - 1) * (x.a + m * x.B + m * x.G) + m * x.C;
}
double allreduce_ps(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args);
  double k = std::clamp(args.ps_roots > 0 ? args.ps_roots : std::min(args.size, 4), 1, args.size);
  // An owner takes in (n-1) shards and sends out (n-1); a non-owner moves the vector once
  // each way. The busier of the two sets the pace.
  double busiest = std::max((x.n - 1) * m / k, m);
  return 2 * (x.n - 1) * x.a + 2 * busiest * x.B + (x.n - 1) * (m / k) * x.G;
}
double allreduce_ring(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args), block = m / x.n;
  if (spans_hosts(args))
    return 2 * (x.n - 1) * HostRounds(args, p).ring_step(block, x.pieces(block)) + (x.n - 1) * block * x.G;
  return 2 * (x.n - 1) * x.xfer(block) + (x.n - 1) * block * x.G;
}
double allreduce_halving_doubling(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args);
  double moved = 0;  // per round, halving then doubling: m/2, m/4, ... each way
  if (spans_hosts(args)) {
    const HostRounds hosts(args, p);
    for (int mask = static_cast<int>(x.p2) / 2; mask >= 1; mask /= 2) {
      const double part = m * mask / x.p2;
      moved += hosts.hypercube(mask, part, x.pieces(part));
    }
  } else {
    for (double part : x.halves(m)) moved += x.xfer(part);
  }
  return 2 * moved + (x.p2 - 1) / x.p2 * m * x.G + fold_cost(x, m, true);
}
double allreduce_recursive_doubling(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args);
  if (spans_hosts(args)) {
    const HostRounds hosts(args, p);
    double rounds = 0;
    for (int mask = 1; mask < static_cast<int>(x.p2); mask *= 2) rounds += hosts.hypercube(mask, m, x.pieces(m));
    return rounds + x.lp2 * m * x.G + fold_cost(x, m, true);
  }
  return x.lp2 * (x.xfer(m) + m * x.G) + fold_cost(x, m, true);
}
double allreduce_binomial(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args);
  if (spans_hosts(args)) {
    const HostRounds hosts(args, p);
    double levels = 0;  // up to the root and back down, a level at each distance
    for (int d = 1; d < args.size; d *= 2) levels += 2 * hosts.tree_level(d, m, x.pieces(m));
    return levels + x.L * m * x.G;
  }
  return x.L * (x.xfer(m) + m * x.G) + x.L * x.xfer(m);
}
// Each tree carries a half of h bytes in k chunks of c. The first chunk climbs and comes
// back down L levels, a parent's link carrying its two children's chunks; every further
// chunk costs each rank four messages (up and to two children in the tree where it is
// interior, up in the one where it is a leaf; as many received) and two reductions.
// Unchunked this is the binomial tree's 2L full-vector steps; pipelined it tends to 2m*B,
// a ring's bandwidth, with 2L latencies instead of 2(n-1).
double allreduce_double_binary_tree(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  const double h = bytes_of(args) / 2, k = x.pieces(h), c = h / k;
  const double fill = 2 * x.L * (x.a + 2 * c * x.B) + x.L * 2 * c * x.G;
  const double steady = (k - 1) * (4 * (x.a + c * x.B) + 2 * c * x.G);
  return fill + steady;
}
// Recursive doubling across `hosts` hosts meets the network's contention at every distance;
// its mean over the rounds stands for all of them.
double far_contention(const CostParams& p, int hosts) {
  if (p.host_contention.empty() || hosts < 2) return 1;
  double sum = 0;
  const int rounds = std::max(1, static_cast<int>(std::log2(floor_pow2(hosts))));
  for (int k = 0; k < rounds; ++k)
    sum += std::max(1.0, p.host_contention[std::min(static_cast<size_t>(k), p.host_contention.size() - 1)]);
  return sum / rounds;
}

// The busiest host (s ranks) runs a ring reduce-scatter and allgather on the intra link;
// across hosts, the rank owning the most shards (ceil(s / smallest host's ranks) of m/s
// each) runs one inter-host allreduce per shard, the one the builder picks, on the
// inter link. A one-rank host copies its input instead of the intra phases.
double allreduce_hierarchical_on_messages(const CollArgs& args, const CostParams& p) {
  const HostLayout hosts = host_layout(args);
  const int s = hosts.max_local();
  CollArgs level = args;
  level.host_of.clear();
  level.size = s;
  // The host's s ranks run their ring at once, every hop on the host's memory path.
  CostParams in_host = p;
  if (p.host_memory_bytes_per_us > 0)
    in_host.beta_bytes_per_us = std::min(p.beta_bytes_per_us, p.host_memory_bytes_per_us / s);
  const double intra = s > 1 ? allreduce_ring(level, in_host) : bytes_of(args) / p.copy_bytes_per_us;
  if (hosts.hosts() == 1) return intra;
  const size_t shard = (args.count + static_cast<size_t>(s) - 1) / static_cast<size_t>(s);
  const double owned = std::ceil(static_cast<double>(s) / hosts.min_local());
  level.size = hosts.hosts();
  level.count = shard;
  // Every rank of a host runs its shard's allreduce across hosts at once: s flows share the
  // host's link, and the network's contention for the pattern slows each.
  CostParams inter = p.across_hosts();
  const bool ring = hierarchical_inter_ring(args, hosts.hosts(), shard);
  inter.beta_bytes_per_us /= s * (ring ? std::max(1.0, p.ring_contention) : far_contention(p, hosts.hosts()));
  const double one = ring ? allreduce_ring(level, inter) : allreduce_recursive_doubling(level, inter);
  return intra + owned * one;
}
// With the intra-host stages on the hosts' segments (CollArgs::intra_on_segment): the
// busiest host's reduce and broadcast there, and between them its first rank's allreduce of
// the whole vector across hosts.
double allreduce_hierarchical_on_segment(const CollArgs& args, const CostParams& p) {
  const HostLayout hosts = host_layout(args);
  CollArgs level;
  level.size = hosts.max_local();
  level.dtype = args.dtype;
  level.count = args.count;
  level.segment_slot_bytes = kCostedSegmentSlot;
  level.op = CollOp::kReduce;
  double cost = segment::segment_cost(level, p);
  level.op = CollOp::kBroadcast;
  cost += segment::segment_cost(level, p);
  if (hosts.hosts() == 1) return cost;
  level.op = CollOp::kAllreduce;
  level.size = hosts.hosts();
  level.segment_slot_bytes = 0;
  level.chunk_count = args.chunk_count;
  CostParams inter = p.across_hosts();
  const bool ring = hierarchical_inter_ring(args, hosts.hosts(), args.count);
  inter.beta_bytes_per_us /= ring ? std::max(1.0, p.ring_contention) : far_contention(p, hosts.hosts());
  return cost + (ring ? allreduce_ring(level, inter) : allreduce_recursive_doubling(level, inter));
}
double allreduce_hierarchical(const CollArgs& args, const CostParams& p) {
  const double on_messages = allreduce_hierarchical_on_messages(args, p);
  return args.host_segments ? std::min(on_messages, allreduce_hierarchical_on_segment(args, p))
                            : on_messages;
}
bool hierarchical_applies(const CollArgs& args) {
  // One rank per host leaves nothing to do within hosts: the plain algorithms cover it.
  return args.host_of.size() == static_cast<size_t>(args.size) && spans_hosts(args) &&
         host_layout(args).max_local() > 1;
}

// ---- reduce ----
double reduce_naive(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args);
  return (x.n - 1) * (x.a + m * x.B + m * x.G);
}
double reduce_binomial(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args);
  return x.L * (x.xfer(m) + m * x.G);
}
double reduce_ring(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args), block = m / x.n;
  return (x.n - 1) * (x.xfer(block) + block * x.G) + (x.n - 1) * x.xfer(block);
}
double reduce_halving_doubling(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args);
  double halving = 0, gather = 0;
  for (double part : x.halves(m)) {
    halving += x.xfer(part) + part * x.G;
    gather += x.xfer(part);
  }
  return halving + gather + fold_cost(x, m, false);
}

// ---- broadcast ----
double bcast_naive(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  return (x.n - 1) * x.xfer(bytes_of(args));
}
double bcast_binomial(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  return x.L * x.xfer(bytes_of(args));
}
double bcast_ring(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args), k = x.pieces(m);
  return (x.n - 2 + k) * (x.a + (m / k) * x.B);
}
double bcast_halving_doubling(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args), rest = (x.n - 1) / x.n * m;
  double scatter = x.L * x.a + rest * x.B;
  double allgather = is_pow2(args.size) ? x.L * x.a + rest * x.B : (x.n - 1) * x.xfer(m / x.n);
  return scatter + allgather;
}

// ---- allgather(v) (m = one rank's block) ----
double allgather_naive(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  if (spans_hosts(args)) return HostRounds(args, p).all_pairs(bytes_of(args));
  return (x.n - 1) * (x.a + bytes_of(args) * x.B);
}
double allgather_ring(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  const double m = bytes_of(args);
  if (spans_hosts(args)) return (x.n - 1) * HostRounds(args, p).ring_step(m, x.pieces(m));
  return (x.n - 1) * x.xfer(m);
}
double allgather_recursive_doubling(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  if (spans_hosts(args) && !x.fold) {  // round k: partners 2^k apart swap 2^k blocks
    const HostRounds hosts(args, p);
    double t = 0;
    for (int mask = 1; mask < args.size; mask *= 2) {
      const double part = bytes_of(args) * mask;
      t += hosts.hypercube(mask, part, x.pieces(part));
    }
    return t;
  }
  return x.L * x.a + (x.n - 1) * bytes_of(args) * x.B;
}
double allgather_binomial(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args);
  return x.L * x.a + (x.n - 1) * m * x.B + x.L * x.xfer(x.n * m);
}

// ---- reduce_scatter(v) (m = one rank's block) ----
double reduce_scatter_naive(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args);
  if (spans_hosts(args)) return HostRounds(args, p).all_pairs(m) + (x.n - 1) * m * x.G;
  return (x.n - 1) * (x.a + m * x.B + m * x.G);
}
double reduce_scatter_ring(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args);
  if (spans_hosts(args)) return (x.n - 1) * (HostRounds(args, p).ring_step(m, x.pieces(m)) + m * x.G);
  return (x.n - 1) * (x.xfer(m) + m * x.G);
}
double reduce_scatter_halving_doubling(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args), total = x.n * m;
  double halving = 0;
  if (spans_hosts(args)) {
    const HostRounds hosts(args, p);
    for (int mask = static_cast<int>(x.p2) / 2; mask >= 1; mask /= 2) {
      const double part = total * mask / x.p2;
      halving += hosts.hypercube(mask, part, x.pieces(part)) + part * x.G;
    }
  } else {
    for (double part : x.halves(total)) halving += x.xfer(part) + part * x.G;
  }
  return halving + (x.fold ? x.xfer(total) + total * x.G + x.xfer(m) : 0);
}
double reduce_scatter_binomial(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args), total = x.n * m;
  return x.L * (x.xfer(total) + total * x.G) + x.L * x.a + (x.n - 1) * m * x.B;
}

// ---- alltoall(v) (m = one block) ----
// Both move (n-1) blocks per rank; the model has no term for the contention of n-1
// simultaneous messages, so it rates them equal. Selection keeps registry order among
// equals, so where naive ties with ring (here, allgather(v), reduce_scatter(v)) ring is
// listed first: it does not rely on the network absorbing n-1 messages at once.
double alltoall_cost(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  return (x.n - 1) * (x.a + bytes_of(args) * x.B);
}

// ---- gather / scatter (m = one block) ----
double gather_naive(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  return (x.n - 1) * (x.a + bytes_of(args) * x.B);
}
double gather_binomial(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  double m = bytes_of(args);
  return x.L * x.a + (x.n - 1) * m * x.B + (x.pieces(m) - 1) * x.L * x.a;
}

// ---- barrier ----
double barrier_naive(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  return 2 * (x.n - 1) * x.a;
}
double barrier_dissemination(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  return x.L * x.a;
}
double barrier_binomial(const CollArgs& args, const CostParams& p) {
  Model x(args, p);
  return 2 * x.L * x.a;
}

using A = Algorithm;
using O = CollOp;

}  // namespace

const std::vector<AlgorithmInfo>& all_algorithms() {
  static const std::vector<AlgorithmInfo> table = {
      {O::kAllreduce, A::kNaive, build_allreduce_naive, allreduce_naive},
      {O::kAllreduce, A::kPs, build_allreduce_ps, allreduce_ps},
      {O::kAllreduce, A::kRing, build_allreduce_ring, allreduce_ring},
      {O::kAllreduce, A::kHalvingDoubling, build_allreduce_halving_doubling,
       allreduce_halving_doubling},
      {O::kAllreduce, A::kRecursiveDoubling, build_allreduce_recursive_doubling,
       allreduce_recursive_doubling},
      {O::kAllreduce, A::kBinomialTree, build_allreduce_binomial_tree, allreduce_binomial},
      {O::kAllreduce, A::kDoubleBinaryTree, build_allreduce_double_binary_tree,
       allreduce_double_binary_tree},
      {O::kAllreduce, A::kHierarchical, build_allreduce_hierarchical, allreduce_hierarchical,
       hierarchical_applies},
      {O::kAllreduce, A::kShm, nullptr, segment::segment_cost, segment::segment_applies},

      {O::kReduce, A::kNaive, build_reduce_naive, reduce_naive},
      {O::kReduce, A::kBinomialTree, build_reduce_binomial_tree, reduce_binomial},
      {O::kReduce, A::kRing, build_reduce_ring, reduce_ring},
      {O::kReduce, A::kHalvingDoubling, build_reduce_halving_doubling, reduce_halving_doubling},
      {O::kReduce, A::kShm, nullptr, segment::segment_cost, segment::segment_applies},

      {O::kBroadcast, A::kNaive, build_broadcast_naive, bcast_naive},
      {O::kBroadcast, A::kBinomialTree, build_broadcast_binomial_tree, bcast_binomial},
      {O::kBroadcast, A::kRing, build_broadcast_ring, bcast_ring},
      {O::kBroadcast, A::kHalvingDoubling, build_broadcast_halving_doubling,
       bcast_halving_doubling},
      {O::kBroadcast, A::kShm, nullptr, segment::segment_cost, segment::segment_applies},

      {O::kAllgather, A::kRing, build_allgather_ring, allgather_ring},
      {O::kAllgather, A::kNaive, build_allgather_naive, allgather_naive},
      {O::kAllgather, A::kRecursiveDoubling, build_allgather_recursive_doubling,
       allgather_recursive_doubling},
      {O::kAllgather, A::kBinomialTree, build_allgather_binomial_tree, allgather_binomial},
      {O::kAllgather, A::kShm, nullptr, segment::segment_cost, segment::segment_applies},
      {O::kAllgatherv, A::kRing, build_allgatherv_ring, allgather_ring},
      {O::kAllgatherv, A::kNaive, build_allgatherv_naive, allgather_naive},
      {O::kAllgatherv, A::kBinomialTree, build_allgatherv_binomial_tree, allgather_binomial},

      {O::kReduceScatter, A::kRing, build_reduce_scatter_ring, reduce_scatter_ring},
      {O::kReduceScatter, A::kNaive, build_reduce_scatter_naive, reduce_scatter_naive},
      {O::kReduceScatter, A::kHalvingDoubling, build_reduce_scatter_halving_doubling,
       reduce_scatter_halving_doubling},
      {O::kReduceScatter, A::kBinomialTree, build_reduce_scatter_binomial_tree,
       reduce_scatter_binomial},
      {O::kReduceScatter, A::kShm, nullptr, segment::segment_cost, segment::segment_applies},
      {O::kReduceScatterv, A::kRing, build_reduce_scatterv_ring, reduce_scatter_ring},
      {O::kReduceScatterv, A::kNaive, build_reduce_scatterv_naive, reduce_scatter_naive},
      {O::kReduceScatterv, A::kBinomialTree, build_reduce_scatterv_binomial_tree,
       reduce_scatter_binomial},

      {O::kAlltoall, A::kRing, build_alltoall_ring, alltoall_cost},
      {O::kAlltoall, A::kNaive, build_alltoall_naive, alltoall_cost},
      {O::kAlltoallv, A::kRing, build_alltoallv_ring, alltoall_cost},
      {O::kAlltoallv, A::kNaive, build_alltoallv_naive, alltoall_cost},

      {O::kGather, A::kNaive, build_gather_naive, gather_naive},
      {O::kGather, A::kBinomialTree, build_gather_binomial_tree, gather_binomial},
      {O::kScatter, A::kNaive, build_scatter_naive, gather_naive},
      {O::kScatter, A::kBinomialTree, build_scatter_binomial_tree, gather_binomial},

      {O::kBarrier, A::kNaive, build_barrier_naive, barrier_naive},
      {O::kBarrier, A::kRecursiveDoubling, build_barrier_recursive_doubling,
       barrier_dissemination},
      {O::kBarrier, A::kBinomialTree, build_barrier_binomial_tree, barrier_binomial},
      {O::kBarrier, A::kShm, nullptr, segment::segment_cost, segment::segment_applies},
  };
  return table;
}

const AlgorithmInfo* find_algorithm(CollOp op, Algorithm algorithm) {
  for (const AlgorithmInfo& info : all_algorithms()) {
    if (info.op == op && info.algorithm == algorithm) return &info;
  }
  return nullptr;
}

bool hierarchical_intra_on_segment(const CollArgs& args, const CostParams& params) {
  return args.host_segments && hierarchical_applies(args) &&
         allreduce_hierarchical_on_segment(args, params) <
             allreduce_hierarchical_on_messages(args, params);
}

bool hierarchical_inter_ring(const CollArgs& args, int hosts, size_t count) {
  CollArgs inter;
  inter.op = CollOp::kAllreduce;
  inter.size = hosts;
  inter.dtype = args.dtype;
  inter.count = count;
  inter.chunk_count = args.chunk_count;
  const CostParams defaults;
  return allreduce_ring(inter, defaults) < allreduce_recursive_doubling(inter, defaults);
}

std::vector<Algorithm> algorithms_for(CollOp op) {
  std::vector<Algorithm> out;
  for (const AlgorithmInfo& info : all_algorithms()) {
    if (info.op == op) out.push_back(info.algorithm);
  }
  return out;
}

}  // namespace plait::coll
