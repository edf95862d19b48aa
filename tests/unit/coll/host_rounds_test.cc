// The cost model's rounds across hosts (coll/select/host_rounds.h): a ring step's latency is
// the mean over its hops, a round whose partners sit on other hosts puts every crossing rank
// of a host on its one link, transfers within a host share its memory path where it is known,
// and the network's contention multiplies the crossing time.
#include "coll/select/host_rounds.h"

#include <gtest/gtest.h>

#include <vector>

namespace plait::coll {
namespace {

CostParams links() {
  CostParams p;
  p.alpha_us = 1;
  p.beta_bytes_per_us = 5000;
  p.inter_alpha_us = 10;
  p.inter_beta_bytes_per_us = 100;
  p.host_memory_bytes_per_us = 5000;  // as plait sim's hosts: all in-host copies share it
  return p;
}

CollArgs blocks(int ranks, int per_host) {
  CollArgs a;
  a.op = CollOp::kAllreduce;
  a.size = ranks;
  a.dtype = DataType::kF32;
  a.count = 1024;
  for (int r = 0; r < ranks; ++r) a.host_of.push_back(r / per_host);
  return a;
}

TEST(HostRounds, ARingStepPaysTheMeanLatencyOfItsHopsAndTheSlowestLink) {
  // 16 ranks, 8 a host: 2 of the 16 hops cross hosts.
  const HostRounds h(blocks(16, 8), links());
  const double alpha = (2 * 10.0 + 14 * 1.0) / 16;
  EXPECT_DOUBLE_EQ(h.ring_step(0, 1), alpha);
  // 1000 bytes: one flow leaves each host (1000/100 us); 7 share a memory path (7*1000/5000).
  EXPECT_DOUBLE_EQ(h.ring_step(1000, 1), alpha + 10);
  // Ranks dealt round-robin: every hop crosses, 8 flows leave each host at once.
  CollArgs dealt = blocks(16, 8);
  for (int r = 0; r < 16; ++r) dealt.host_of[static_cast<size_t>(r)] = r % 2;
  EXPECT_DOUBLE_EQ(HostRounds(dealt, links()).ring_step(1000, 1), 10 + 8 * 10);
}

TEST(HostRounds, AHypercubeRoundAcrossHostsSharesTheHostLinkAmongItsRanks) {
  const HostRounds h(blocks(16, 4), links());
  // mask 1, 2: partners on the same host, 4 ranks on its memory path.
  EXPECT_DOUBLE_EQ(h.hypercube(2, 5000, 1), 1 + 4 * 1.0);
  // mask 4, 8: every rank's partner is on another host, 4 flows on each host link.
  EXPECT_DOUBLE_EQ(h.hypercube(8, 5000, 2), 2 * 10 + 4 * 50.0);
  // A host whose memory path is not known: its cores copy in parallel.
  CostParams unknown = links();
  unknown.host_memory_bytes_per_us = 0;
  EXPECT_DOUBLE_EQ(HostRounds(blocks(16, 4), unknown).hypercube(2, 5000, 1), 1 + 1.0);
}

TEST(HostRounds, ATreeLevelLoadsOnlyItsSenders) {
  const HostRounds h(blocks(16, 4), links());
  // Distance 4: senders 0 and 8, one a host crossing.
  EXPECT_DOUBLE_EQ(h.tree_level(4, 1000, 1), 10 + 10);
  // Distance 1: senders 0, 2 on host 0, within it.
  EXPECT_DOUBLE_EQ(h.tree_level(1, 5000, 1), 1 + 2 * 1.0);
}

TEST(HostRounds, TheNetworksContentionSlowsCrossingFlowsOnly) {
  CostParams p = links();
  p.host_contention = {1, 3, 6};  // hosts 1, 2, 4+ apart
  p.ring_contention = 2;
  const HostRounds h(blocks(32, 4), p);
  EXPECT_DOUBLE_EQ(h.contention(4), 1);   // 1 host apart
  EXPECT_DOUBLE_EQ(h.contention(8), 3);   // 2 hosts apart
  EXPECT_DOUBLE_EQ(h.contention(16), 6);  // 4 hosts apart
  EXPECT_DOUBLE_EQ(h.hypercube(16, 1000, 1), 10 + 4 * 10.0 * 6);
  EXPECT_DOUBLE_EQ(h.hypercube(1, 5000, 1), 1 + 4 * 1.0);  // within hosts: no contention
  const double alpha = (8 * 10.0 + 24 * 1.0) / 32;
  EXPECT_DOUBLE_EQ(h.ring_step(1000, 1), alpha + 2 * 10);
  // A job that knows nothing of its network assumes a non-blocking one.
  EXPECT_DOUBLE_EQ(HostRounds(blocks(32, 4), links()).contention(16), 1);
}

}  // namespace
}  // namespace plait::coll
