// The cost of one round of a flat algorithm whose ranks span hosts. A round is every rank
// sending to a partner at once; what it costs depends on where the partners sit:
//
//   - A transfer that crosses hosts pays the inter-host alpha and shares its host's link with
//     every other rank of that host crossing in the same round (8 ranks a host exchanging
//     with other hosts put 8 flows on one NIC), slowed further by the network's contention
//     for that pattern (CostParams::host_contention: 1 on a non-blocking network).
//   - A transfer within a host pays the intra-host alpha and, where the host's memory path
//     is known (CostParams::host_memory_bytes_per_us), shares it with the host's other
//     ranks copying in the same round.
//   - The round takes as long as its slowest transfer.
//
// A ring step is the exception: the step's critical path walks around the ring, one hop a
// step, so its latency is the mean over the hops, not the worst (2(p-1) steps of a ring over
// 16,384 ranks, 8 a host, pay seven intra-host latencies for every inter-host one); and its
// hops within a host share the memory path only as far as their copies overlap in time,
// little where the step's latency dwarfs its copy.
#pragma once

#include "coll/schedule/hosts.h"
#include "coll/select/cost_params.h"

namespace plait::coll {

class HostRounds {
 public:
  // `args.host_of` must span hosts (spans_hosts(args)).
  HostRounds(const CollArgs& args, const CostParams& params);

  // A round in which rank r < floor_pow2(n) sends `bytes`, in `pieces` messages, to r ^ mask.
  double hypercube(int mask, double bytes, double pieces) const;
  // A round in which rank r sends to r + distance (a binomial tree's level): only the ranks
  // that send, those with r % (2 distance) == 0, load the links.
  double tree_level(int distance, double bytes, double pieces) const;
  // One step of a ring r -> r + 1 (mod n), `bytes` in `pieces` messages.
  double ring_step(double bytes, double pieces) const;
  // Every rank sends `bytes` to every other at once (the naive algorithms): each pays n - 1
  // latencies, a host's link carries what its ranks send off the host.
  double all_pairs(double bytes) const;

  int ranks_per_host() const { return layout_.max_local(); }
  // The network's contention for a round whose partners are `rank_distance` ranks apart.
  double contention(int rank_distance) const;
  const CostParams& inter() const { return inter_; }

 private:
  // Where a round's transfers sit: the most crossing transfers leaving one host, the most
  // transfers within one host, and whether any does either.
  struct Load {
    int crossing = 0;  // on the busiest host
    int within = 0;
  };
  template <typename Partner>
  Load load(int senders, Partner partner) const;
  double cost(const Load& l, double bytes, double pieces, double contention) const;
  // Per byte of each of `transfers` transfers within one host at once: the intra link, or
  // their share of the host's memory path where it is known.
  double within_per_byte(int transfers) const;

  HostLayout layout_;
  CostParams intra_;
  CostParams inter_;
  Load ring_;
};

}  // namespace plait::coll
