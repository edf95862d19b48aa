// The full replay through the first rank of each host (src/sim/rank_copies.h): exact where a
// message's copies on the host's other ranks take its paths, checked against every rank's
// replay; said to be the slowest copy where they do not; refused where the host's ranks are
// not relabellings of its first rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "coll/select/algorithms.h"
#include "sim/full_replay.h"
#include "sim/replay.h"
#include "sim/topology_spec.h"
#include "support/sim_calls.h"

namespace plait::sim {
namespace {

// The call as replay() hands it on: its size and every rank's host.
coll::CollArgs placed(coll::CollArgs a, const Placement& place) {
  a.size = place.ranks;
  a.host_of.clear();
  for (int r = 0; r < place.ranks; ++r) a.host_of.push_back(place.host_of(r));
  return a;
}

TEST(InHostCopies, MatchTheFullReplayWhereCopiesShareTheirPaths) {
  struct Point {
    const char* topology;
    int ranks;
    int per_host;
    size_t chunk;  // elements; the pipelined hierarchical allreduce is no relabelling by host
  };
  for (const Point& pt : std::vector<Point>{
           {"star:hosts=4", 16, 4, 1 << 12},
           {"star:hosts=6,rate=10gbit", 24, 4, 1 << 13},
           {"ring:hosts=5,latency=5us", 10, 2, 1 << 12},
           {"dragonfly:a=2,p=2,h=1", 24, 4, 1 << 12},
           {"fattree:k=4,ecmp=packet", 32, 4, 1 << 11},
           {"torus:dims=2x3", 48, 8, 1 << 13},
           {"star:hosts=4,rate=1gbit,burst=64kb", 16, 4, 1 << 12},
       }) {
    auto t = parse_topology(pt.topology);
    const Placement place{.ranks = pt.ranks, .ranks_per_host = pt.per_host};
    coll::CollArgs a = allreduce_of(static_cast<size_t>(pt.ranks) << 14);
    a.chunk_count = pt.chunk;
    a = placed(a, place);
    const auto* info = coll::find_algorithm(a.op, coll::Algorithm::kHierarchical);
    const std::string what = std::string(pt.topology) + ", " + std::to_string(pt.ranks) +
                             " ranks, " + std::to_string(pt.per_host) + " a host";
    const ReplayResult full = replay_every_rank(*t, place, a, *info, SimParams{});
    const auto copies = replay_in_host_copies(*t, place, a, *info, SimParams{});
    ASSERT_TRUE(copies.has_value()) << what;
    EXPECT_TRUE(copies->exact) << what;
    const ReplayResult& r = copies->result;
    EXPECT_EQ(r.method, "in-host copies") << what;
    EXPECT_NEAR(r.time_s, full.time_s, full.time_s * 1e-9) << what;
    EXPECT_EQ(r.messages, full.messages) << what;
    EXPECT_EQ(r.rounds, full.rounds) << what;
    EXPECT_EQ(r.sent_messages, full.sent_messages) << what;
    EXPECT_NEAR(r.network_bytes, full.network_bytes, 1) << what;
    EXPECT_EQ(r.bottleneck_link, full.bottleneck_link) << what;
    ASSERT_EQ(r.link_bytes.size(), full.link_bytes.size()) << what;
    for (size_t l = 0; l < r.link_bytes.size(); ++l)
      EXPECT_NEAR(r.link_bytes[l], full.link_bytes[l], 1e-6 * full.link_bytes[l] + 1)
          << what << ", link " << l;
  }
}

// Per-flow ECMP hashes each copy onto its own core: a message is in when its slowest copy is,
// and the result says so. Its copies are hashed otherwise than the full replay's messages, so
// it is near the full replay, not equal to it.
TEST(InHostCopies, SayWhenCopiesTakeOtherPaths) {
  auto t = parse_topology("fattree:k=4");
  const Placement place{.ranks = 64, .ranks_per_host = 4};
  coll::CollArgs a = allreduce_of(size_t{64} << 14);
  a.chunk_count = 1 << 12;
  a = placed(a, place);
  const auto* info = coll::find_algorithm(a.op, coll::Algorithm::kHierarchical);
  const ReplayResult full = replay_every_rank(*t, place, a, *info, SimParams{});
  const auto copies = replay_in_host_copies(*t, place, a, *info, SimParams{});
  ASSERT_TRUE(copies.has_value());
  EXPECT_FALSE(copies->exact);
  EXPECT_EQ(copies->result.method, "in-host copies, slowest copy");
  EXPECT_EQ(copies->result.messages, full.messages);
  EXPECT_NEAR(copies->result.time_s, full.time_s, full.time_s * 0.1);
}

TEST(InHostCopies, OnlyWhereAHostsRanksAreItsFirstRankRelabelled) {
  auto star = parse_topology("star:hosts=8");
  const Placement place{.ranks = 16, .ranks_per_host = 4};
  coll::CollArgs a = placed(allreduce_of(size_t{16} << 12), place);
  // A ring's last rank on a host talks to the next host's first: not a turn round its host.
  for (coll::Algorithm algo : {coll::Algorithm::kRing, coll::Algorithm::kBinomialTree,
                               coll::Algorithm::kNaive, coll::Algorithm::kDoubleBinaryTree})
    EXPECT_FALSE(replay_in_host_copies(*star, place, a, *coll::find_algorithm(a.op, algo),
                                       SimParams{}))
        << coll::to_string(algo);
  const auto* hierarchical = coll::find_algorithm(a.op, coll::Algorithm::kHierarchical);
  EXPECT_TRUE(replay_in_host_copies(*star, place, a, *hierarchical, SimParams{}));
  // One rank a host has nothing to stand for; a FIFO link's order is every rank's posting.
  const Placement alone{.ranks = 8, .ranks_per_host = 1};
  EXPECT_FALSE(replay_in_host_copies(*star, alone, placed(allreduce_of(1 << 12), alone),
                                     *coll::find_algorithm(a.op, coll::Algorithm::kRing),
                                     SimParams{}));
  auto fifo = parse_topology("star:hosts=8,queue=fifo");
  EXPECT_FALSE(replay_in_host_copies(*fifo, place, a, *hierarchical, SimParams{}));
}

// Left to choose (--replay auto), a pipelined hierarchical allreduce on a network whose copies
// share their paths is replayed through the first rank of each host (an eighth of the steps
// here, the same result), and in full where they do not (ECMP hashing each flow).
TEST(InHostCopies, AreTakenWhereTheyAreExact) {
  const Placement place{.ranks = 1024, .ranks_per_host = 8};
  coll::CollArgs a = allreduce_of(size_t{1} << 24);
  a.chunk_count = size_t{1} << 18;
  auto dragonfly = parse_topology("dragonfly:a=4,p=4,h=2");
  const ReplayResult r = replay(*dragonfly, place, a, coll::Algorithm::kHierarchical, SimParams{});
  EXPECT_EQ(r.method, "in-host copies");
  EXPECT_GT(r.messages, static_cast<size_t>(1024) * 2 * 127);
  const ReplayResult full = replay(*dragonfly, place, a, coll::Algorithm::kHierarchical,
                                   SimParams{}, ReplayMode::kFull);
  EXPECT_NEAR(r.time_s, full.time_s, full.time_s * 1e-9);
  auto tree = parse_topology("fattree:k=8");
  EXPECT_EQ(replay(*tree, place, a, coll::Algorithm::kHierarchical, SimParams{}).method, "full");
  EXPECT_EQ(replay(*tree, place, a, coll::Algorithm::kHierarchical, SimParams{},
                   ReplayMode::kSymmetric).method,
            "in-host copies, slowest copy");
}

}  // namespace
}  // namespace plait::sim
