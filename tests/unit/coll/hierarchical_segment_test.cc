// The hierarchical allreduce with its intra-host stages on the hosts' collective segments
// (CollArgs::intra_on_segment): what its schedule leaves to the messages (the allreduce
// among each host's first ranks, nothing for the others) and when the model picks it. The
// stages themselves run in the engine; the mixed-host collective sweeps and the fault tests
// run them across processes.
#include <gtest/gtest.h>

#include <set>

#include "coll/schedule/hosts.h"
#include "coll/select/algorithms.h"
#include "coll/select/select.h"

namespace plait::coll {
namespace {

CollArgs call(int rank, std::vector<int> host_of, size_t count) {
  CollArgs a;
  a.op = CollOp::kAllreduce;
  a.rank = rank;
  a.size = static_cast<int>(host_of.size());
  a.dtype = DataType::kF32;
  a.count = count;
  a.chunk_count = (size_t{1} << 20) / 4;
  a.host_of = std::move(host_of);
  a.host_segments = true;
  return a;
}

Schedule build(const CollArgs& a) {
  return find_algorithm(CollOp::kAllreduce, Algorithm::kHierarchical)->build(a);
}

TEST(HierarchicalOnSegment, OnlyEachHostsFirstRankTalksAndOnlyToTheOthersFirstRanks) {
  // Interleaved, uneven, unsorted labels, and a host of one rank.
  for (const std::vector<int>& hosts :
       {std::vector<int>{0, 1, 0, 1}, std::vector<int>{3, 3, 1, 3, 1},
        std::vector<int>{5, 2, 5, 5, 7}}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1000}}) {
      for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
        CollArgs a = call(r, hosts, count);
        a.intra_on_segment = true;
        const HostLayout layout = host_layout(a);
        std::set<int> firsts;
        for (const auto& ranks : layout.ranks) firsts.insert(ranks.front());
        const Schedule s = build(a);
        if (!firsts.count(r)) {
          EXPECT_TRUE(s.steps.empty()) << "rank " << r << " of " << hosts.size();
          continue;
        }
        bool copies = false;
        for (const Step& st : s.steps) {
          if (st.kind == StepKind::kCopy) copies = true;
          if (st.kind == StepKind::kSend || st.kind == StepKind::kRecv) {
            EXPECT_TRUE(firsts.count(st.peer)) << "rank " << r << " talks to " << st.peer;
          }
          // The segment reduced into the output: the schedule reads and writes only there.
          if (st.kind == StepKind::kSend) {
            EXPECT_NE(st.src.buffer, BufferId::kInput);
          }
        }
        // A rank alone on its host brings its input to the output itself.
        const bool alone = layout.ranks_on(layout.host[static_cast<size_t>(r)]) == 1;
        EXPECT_EQ(copies, alone && count > 0) << "rank " << r;
      }
    }
  }
}

TEST(HierarchicalOnSegment, TheModelPicksItForSmallVectorsWhereEveryHostHasASegment) {
  CostParams p;
  p.alpha_us = 2;
  p.beta_bytes_per_us = 5000;
  p.flag_us = 0.3;
  p.inter_alpha_us = 15;
  p.inter_beta_bytes_per_us = 3000;
  const std::vector<int> hosts{0, 1, 0, 1, 0, 1, 0, 1};
  EXPECT_TRUE(hierarchical_intra_on_segment(call(0, hosts, 2), p));
  EXPECT_TRUE(hierarchical_intra_on_segment(call(0, hosts, 1024), p));
  // Large: every rank carries its shard across hosts at once, where the first ranks alone
  // would carry the whole vector.
  EXPECT_FALSE(hierarchical_intra_on_segment(call(0, hosts, 16 << 20), p));
  // Without segments on every host, or on one host, never.
  CollArgs none = call(0, hosts, 2);
  none.host_segments = false;
  EXPECT_FALSE(hierarchical_intra_on_segment(none, p));
  EXPECT_FALSE(hierarchical_intra_on_segment(call(0, std::vector<int>(8, 0), 2), p));

  // The selection carries the choice, and says so, forced or not.
  const Config config;
  const Selection forced = select_algorithm(call(0, hosts, 2), "hierarchical", config, p);
  EXPECT_TRUE(forced.intra_on_segment);
  EXPECT_NE(forced.reason.find("collective segments"), std::string::npos) << forced.reason;
  const Selection big = select_algorithm(call(0, hosts, 16 << 20), "hierarchical", config, p);
  EXPECT_FALSE(big.intra_on_segment);
  const Selection ring = select_algorithm(call(0, hosts, 2), "ring", config, p);
  EXPECT_FALSE(ring.intra_on_segment);
}

TEST(HierarchicalOnSegment, ItsCostIsTheCheaperOfTheTwoWays) {
  CostParams p;
  p.inter_alpha_us = 15;
  const AlgorithmInfo* h = find_algorithm(CollOp::kAllreduce, Algorithm::kHierarchical);
  auto cost = [&](size_t count, bool segments) {
    CollArgs a = call(0, {0, 1, 0, 1}, count);
    a.host_segments = segments;
    return h->cost(a, p);
  };
  EXPECT_LT(cost(2, true), cost(2, false));  // two flags instead of two message latencies
  EXPECT_LE(cost(size_t{1} << 22, true), cost(size_t{1} << 22, false));
}

}  // namespace
}  // namespace plait::coll
