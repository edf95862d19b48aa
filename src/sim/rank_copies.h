// Which ranks a full replay steps through, and which ranks each of them stands for.
//
// Every rank: the plain full replay. In-host rotation: where every rank's schedule is that of
// the first rank of its host with every peer moved round its own host by the same amount
// (rank l of host h talks to rank l' of host h' as rank 0 talks to rank l' - l, mod the
// ranks per host: the hierarchical allreduce, whose local ranks each carry one shard across
// hosts), the first rank of each host is replayed and each of its messages stands for its
// copies on the host's other ranks. Those go between the same two hosts at the same time:
// they are flows beside it (one weighted flow where their paths are the same), and the
// message is in once all of them are. Hosts may differ from one another (a pipelined
// hierarchical allreduce's inter-host ring starts each host on another chunk), which the
// symmetric replay (symmetric_replay.h) cannot take and this one does not need.
#pragma once

#include <utility>

#include "coll/schedule/schedule.h"
#include "coll/select/algorithms.h"
#include "sim/relabelling.h"
#include "sim/replay.h"

namespace plait::sim {

class RankCopies {
 public:
  static RankCopies every_rank(int ranks) { return RankCopies(ranks, 1); }
  // Needs every host full: ranks a multiple of placement.ranks_per_host.
  static RankCopies rotation_in_hosts(const Placement& placement) {
    return RankCopies(placement.ranks, placement.ranks_per_host);
  }

  int ranks() const { return ranks_; }
  int reps() const { return ranks_ / copies_; }
  int copies() const { return copies_; }
  int rep_rank(int i) const { return i * copies_; }
  // Copy d of `rank` (d = 0: itself).
  int image(int rank, int d) const {
    return rank - rank % copies_ + (rank % copies_ + d) % copies_;
  }
  // (i, d) with image(rep_rank(i), d) == rank.
  std::pair<int, int> split(int rank) const { return {rank / copies_, rank % copies_}; }
  // The d' that undoes copy d: image(image(r, d), inverse(d)) == r.
  int inverse(int d) const { return (copies_ - d) % copies_; }

  // Whether `other` (rank image(rep_rank(i), d)'s schedule) is `rep`'s with every peer moved
  // to its copy d: same steps, sizes and dependencies.
  bool relabels(const coll::Schedule& rep, const coll::Schedule& other, int d) const {
    return relabelled(rep, other, [&](int peer) { return image(peer, d); });
  }
  // relabels() for every copy of the replayed ranks of a few hosts: the first ones, the middle
  // and the last (where a ring or a tree over hosts turns). `args` has its size and host_of.
  bool relabel_sampled_hosts(coll::CollArgs args, const coll::AlgorithmInfo& info) const;

 private:
  RankCopies(int ranks, int copies) : ranks_(ranks), copies_(copies) {}
  int ranks_;
  int copies_;
};

}  // namespace plait::sim
