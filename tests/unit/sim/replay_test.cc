// The simulator's replay: max-min sharing of links, and collectives against closed forms on
// networks where the answer is known.
#include <gtest/gtest.h>

#include "coll/schedule/schedule.h"
#include "coll/select/algorithms.h"
#include "plait/error.h"
#include "sim/flow_network.h"
#include "sim/replay.h"
#include "sim/symmetric_replay.h"
#include "sim/topology_spec.h"
#include "support/sim_calls.h"

namespace plait::sim {
namespace {

TEST(FlowNetwork, TwoFlowsOnABottleneckShareItMaxMinFairly) {
  // Link 0 (10 B/s) carries A and B; B also crosses link 1 (4 B/s): B is held to 4 by link 1,
  // A takes the 6 left on link 0.
  FlowNetwork net({10.0, 4.0});
  const int a = net.add(60, {0});
  const int b = net.add(40, {0, 1});
  EXPECT_DOUBLE_EQ(net.next_finish(), 10.0);  // both at 6 and 4: A 60/6, B 40/4
  EXPECT_DOUBLE_EQ(net.rate(a), 6.0);
  EXPECT_DOUBLE_EQ(net.rate(b), 4.0);
  net.advance(10.0);
  EXPECT_EQ(net.take_finished().size(), 2u);
  EXPECT_DOUBLE_EQ(net.link_bytes()[0], 100.0);
  EXPECT_DOUBLE_EQ(net.link_bytes()[1], 40.0);
}

TEST(FlowNetwork, AFlowThatEndsGivesItsShareToTheOthers) {
  FlowNetwork net({10.0});
  const int small = net.add(10, {0});
  const int big = net.add(30, {0});
  EXPECT_DOUBLE_EQ(net.next_finish(), 2.0);  // 5 B/s each: the small one ends at 2 s
  net.advance(2.0);
  EXPECT_EQ(net.take_finished(), std::vector<int>{small});
  EXPECT_DOUBLE_EQ(net.next_finish(), 4.0);  // 20 B left at the whole 10 B/s
  EXPECT_DOUBLE_EQ(net.rate(big), 10.0);
}

TEST(FlowNetwork, APriorityTakesWhatTheOnesBeforeItLeave) {
  // Link 0 (10 B/s) carries A (priority 0) and B (priority 1); A also crosses link 1 (4 B/s).
  // A takes its 4, B the 6 left; alone on link 0, B would still take only what A leaves.
  FlowNetwork net({10.0, 4.0, 10.0});
  const int a = net.add(40, {0, 1}, 0);
  const int b = net.add(60, {0}, 1);
  EXPECT_DOUBLE_EQ(net.next_finish(), 10.0);
  EXPECT_DOUBLE_EQ(net.rate(a), 4.0);
  EXPECT_DOUBLE_EQ(net.rate(b), 6.0);
  // C (priority 0) on link 0 alone: A and C share link 0 max-min (A still held to 4 by link
  // 1, C 6), B gets nothing until one of them is done.
  const int c = net.add(60, {0, 2}, 0);
  EXPECT_DOUBLE_EQ(net.next_finish(), 10.0);
  EXPECT_DOUBLE_EQ(net.rate(c), 6.0);
  EXPECT_DOUBLE_EQ(net.rate(b), 0.0);
  // B moves up: the three share link 0 as equals, 10/3 each (below link 1's 4).
  net.set_priority(b, 0);
  net.next_finish();
  for (int f : {a, b, c}) EXPECT_DOUBLE_EQ(net.rate(f), 10.0 / 3);
}

TEST(FlowNetwork, ATokenBucketPassesItsBurstAtPeakOnceTheLinkIdled) {
  // 10 B/s, a 20 B bucket drained at 100 B/s. Empty at first: 50 B take 5 s at the rate.
  FlowNetwork net({10.0});
  net.set_bucket(0, 20.0, 100.0);
  net.add(50, {0});
  EXPECT_DOUBLE_EQ(net.next_finish(), 5.0);
  net.advance(5.0);
  net.take_finished();
  // 4 s idle fill the bucket (to its 20 B). The next 50 B: 100 B/s until the bucket is dry
  // (it drains at 100 - 10 B/s: 2/9 s, 22.2 B), then 27.8 B at 10 B/s: 3 s in all.
  net.advance(9.0);
  net.add(50, {0});
  const double dry = net.next_finish();
  EXPECT_NEAR(dry, 9.0 + 2.0 / 9, 1e-9);
  net.advance(dry);
  EXPECT_NEAR(net.next_finish(), 12.0, 1e-9);
}

TEST(FlowNetwork, ABucketThatStartsFullPassesItsBurstAtOnce) {
  FlowNetwork net({10.0});
  net.set_bucket(0, 20.0, 100.0, 20.0);
  net.add(50, {0});
  const double dry = net.next_finish();  // 100 B/s until dry: 20 / (100 - 10) s
  EXPECT_NEAR(dry, 2.0 / 9, 1e-12);
  net.advance(dry);
  EXPECT_NEAR(net.tokens(0), 0, 1e-9);
  EXPECT_NEAR(net.next_finish(), 3.0, 1e-9);  // 27.8 B left at 10 B/s
  net.advance(3.0);
  net.take_finished();
  net.advance(4.0);
  EXPECT_NEAR(net.tokens(0), 10, 1e-9);  // idle for 1 s: 10 B back
}

// No reduction or copy cost: only the network's.
SimParams network_only(double alpha) {
  SimParams p;
  p.alpha_s = alpha;
  p.gamma_bytes_per_s = 1e18;
  p.copy_bytes_per_s = 1e18;
  return p;
}

// Ring allreduce on a ring of hosts, one rank each: 2(p-1) steps of n/p bytes to a neighbour,
// one flow per link and direction: T = 2(p-1) (alpha + latency + n / (p beta)).
TEST(Replay, RingAllreduceOnAnUncontendedRingMatchesTheClosedForm) {
  for (int p : {2, 4, 8}) {
    auto ring = parse_topology("ring:hosts=" + std::to_string(p) + ",rate=1gbit,latency=20us");
    const size_t count = 1 << 20;  // 4 MiB of f32, a multiple of every p here
    const double alpha = 5e-6, latency = 20e-6, beta = 1.25e8;
    const double n = count * 4.0;
    const ReplayResult r = replay(*ring, {.ranks = p, .ranks_per_host = 1}, allreduce_of(count),
                                  coll::Algorithm::kRing, network_only(alpha));
    const double expect = 2.0 * (p - 1) * (alpha + latency + n / (p * beta));
    EXPECT_NEAR(r.time_s, expect, expect * 1e-9) << "p=" << p;
    EXPECT_EQ(r.messages, static_cast<size_t>(2 * (p - 1) * p));
    EXPECT_NEAR(r.bottleneck_busy, 2.0 * (p - 1) * n / (p * beta) / expect, 1e-6);
    EXPECT_FALSE(r.critical_path.empty());
  }
}

// Naive alltoall on a star: every host sends p-1 blocks at once through its one link, which
// they share: T = alpha + 2 latency + (p-1) m / beta.
TEST(Replay, AlltoallOnAStarIsBoundByEachHostsLink) {
  const int p = 4;
  auto star = parse_topology("star:hosts=4,rate=1gbit,latency=10us");
  coll::CollArgs a;
  a.op = coll::CollOp::kAlltoall;
  a.dtype = DataType::kF32;
  a.count = 1 << 18;  // per destination: 1 MiB
  const ReplayResult r =
      replay(*star, {.ranks = p, .ranks_per_host = 1}, a, coll::Algorithm::kNaive, network_only(5e-6));
  const double m = a.count * 4.0;
  const double expect = 5e-6 + 2 * 10e-6 + (p - 1) * m / 1.25e8;
  EXPECT_NEAR(r.time_s, expect, expect * 1e-6);
  EXPECT_NEAR(r.network_bytes, p * (p - 1) * m, 1);
}

// A binomial broadcast on a star, 4 ranks: the root's link carries the whole buffer to each
// of its two children (rank 2 first), half the rate each; rank 2 hands every chunk on to rank 3
// as it arrives. A pair's messages leave one at a time, in order, so chunk k is whole at
// rank 2 after (k + 1) c / (beta / 2) and only the last chunk's forwarding follows the root's
// 2n / beta: T = (2n + c) / beta. (Shared among all of a pair's posted chunks, the root's link
// would finish them together at the end, and rank 3 would wait for nearly all of them.)
TEST(Replay, APairsMessagesLeaveOneAtATimeInOrder) {
  auto star = parse_topology("star:hosts=4,rate=1gbit,latency=0us");
  coll::CollArgs a;
  a.op = coll::CollOp::kBroadcast;
  a.dtype = DataType::kF32;
  a.count = 1 << 22;        // 16 MiB
  a.chunk_count = 1 << 18;  // 1 MiB chunks
  const double n = a.count * 4.0, c = a.chunk_count * 4.0, beta = 1.25e8;
  for (ReplayMode mode : {ReplayMode::kFull, ReplayMode::kAuto}) {
    const ReplayResult r = replay(*star, {.ranks = 4, .ranks_per_host = 1}, a,
                                  coll::Algorithm::kBinomialTree, network_only(0), mode);
    EXPECT_NEAR(r.time_s, (2 * n + c) / beta, 1e-9);
  }
  // The symmetric replay queues a pair's messages alike: pipelined halving-doubling sends a
  // partner its units one after another, and matches the full replay.
  auto big = parse_topology("star:hosts=8,rate=1gbit,latency=5us");
  coll::CollArgs h = allreduce_of(1 << 22);
  h.chunk_count = 1 << 16;
  const ReplayResult full = replay(*big, {.ranks = 8, .ranks_per_host = 1}, h,
                                   coll::Algorithm::kHalvingDoubling, network_only(5e-6),
                                   ReplayMode::kFull);
  const ReplayResult sym = replay(*big, {.ranks = 8, .ranks_per_host = 1}, h,
                                  coll::Algorithm::kHalvingDoubling, network_only(5e-6),
                                  ReplayMode::kSymmetric);
  EXPECT_NE(sym.method, "full");
  EXPECT_NEAR(sym.time_s, full.time_s, full.time_s * 1e-9);
}

// queue=fifo: a host's link serves its messages in posting order. A binomial broadcast of n on
// eight hosts at rate R: the root posts its sends to 4, 2 and 1 at once (n = 2 MiB, in one
// piece: a rendezvous over TCP, not acknowledged). Shared max-min, the three finish together
// at 3n/R and 4's subtree is two more sends deep behind them; in posting order 4 has its copy
// at n/R, 2 at 2n/R, and every rank has it by 3n/R (the root's link busy throughout). At
// 1 MiB each child acknowledges and a node's sends go one after another: 3n/R shared too.
TEST(Replay, AFifoLinkSendsItsMessagesInPostingOrder) {
  coll::CollArgs a;
  a.op = coll::CollOp::kBroadcast;
  a.dtype = DataType::kF32;
  a.count = 1 << 19;  // 2 MiB, one chunk
  const double n = a.count * 4.0, R = 1.25e8;
  auto fair = parse_topology("star:hosts=8,rate=1gbit,latency=0us");
  auto fifo = parse_topology("star:hosts=8,rate=1gbit,latency=0us,queue=fifo");
  const Placement eight{.ranks = 8, .ranks_per_host = 1};
  EXPECT_NEAR(replay(*fifo, eight, a, coll::Algorithm::kBinomialTree, network_only(0)).time_s,
              3 * n / R, 1e-9);
  // Shared: the root's three at 3n/R; 4's to 6 and 5 shared, 2n/R; 6's to 7, n/R.
  EXPECT_NEAR(replay(*fair, eight, a, coll::Algorithm::kBinomialTree, network_only(0)).time_s,
              6 * n / R, 1e-9);
  a.count = 1 << 18;
  EXPECT_NEAR(replay(*fair, eight, a, coll::Algorithm::kBinomialTree, network_only(0)).time_s,
              3 * n / 2 / R, 1e-9);
  // A FIFO link's order is every rank's: no replay through rank 0.
  EXPECT_EQ(replay(*fifo, eight, allreduce_of(1 << 18), coll::Algorithm::kRing, network_only(0))
                .method,
            "full");
}

// Collectives run back to back: a shaped link that idles at the end of a call starts the next
// with the burst it gathered. A binomial reduce-scatter on two shaped hosts: rank 1 sends its
// whole vector (n) to rank 0, which sends the half that is rank 1's back. In the first call
// 1's link is empty and n takes n / R; then 0's link, idle meanwhile, passes its burst b at
// the peak P before the rate: b / (P - R) + (n/2 - P b / (P - R)) / R. In every call after,
// 1's link has idled through that second half and starts with its burst too.
TEST(Replay, AShapedLinkIdleAtTheEndOfACallStartsTheNextWithItsBurst) {
  auto star = parse_topology("star:hosts=2,rate=1gbit,latency=0us,burst=512kb,peak=10gbit");
  coll::CollArgs a;
  a.op = coll::CollOp::kReduceScatter;
  a.dtype = DataType::kF32;
  a.count = 1 << 20;  // each rank's block: 4 MiB, 8 MiB in all
  const double n = 2 * a.count * 4.0, R = 1.25e8, P = 1.25e9, b = 524288;
  const double burst_s = b / (P - R), burst_bytes = P * b / (P - R);
  const double half = burst_s + (n / 2 - burst_bytes) / R;
  const double whole = burst_s + (n - burst_bytes) / R;
  const ReplayResult r = replay(*star, {.ranks = 2, .ranks_per_host = 1}, a,
                                coll::Algorithm::kBinomialTree, network_only(0));
  EXPECT_NEAR(r.time_s, whole + half, 1e-9);
  EXPECT_LT(r.time_s, n / R + half);  // the first call's
}

// Two ranks per host: the ranks of one host talk through its memory path, not the network.
TEST(Replay, RanksOfOneHostDoNotUseTheNetwork) {
  auto star = parse_topology("star:hosts=2");
  const ReplayResult r = replay(*star, {.ranks = 2, .ranks_per_host = 2}, allreduce_of(1 << 16),
                                coll::Algorithm::kRing, network_only(5e-6));
  EXPECT_EQ(r.network_bytes, 0);
  EXPECT_EQ(r.bottleneck_link, -1);
  EXPECT_GT(r.time_s, 0);
}

TEST(Replay, EveryAllreduceAlgorithmRunsToTheEnd) {
  auto tree = parse_topology("fattree:k=4");
  for (coll::Algorithm algo :
       {coll::Algorithm::kNaive, coll::Algorithm::kPs, coll::Algorithm::kRing,
        coll::Algorithm::kHalvingDoubling, coll::Algorithm::kRecursiveDoubling,
        coll::Algorithm::kBinomialTree, coll::Algorithm::kDoubleBinaryTree,
        coll::Algorithm::kHierarchical}) {
    coll::CollArgs a = allreduce_of(1 << 18);
    a.chunk_count = 1 << 16;
    const ReplayResult r = replay(*tree, {.ranks = 12, .ranks_per_host = 2}, a, algo, SimParams{});
    EXPECT_GT(r.time_s, 0) << coll::to_string(algo);
    EXPECT_GT(r.network_bytes, 0) << coll::to_string(algo);
  }
}

TEST(Replay, BadInputIsAClearError) {
  auto star = parse_topology("star:hosts=4");
  try {
    replay(*star, {.ranks = 9, .ranks_per_host = 2}, allreduce_of(8), coll::Algorithm::kRing,
           SimParams{});
    ADD_FAILURE() << "9 ranks on 4 hosts of 2 were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("need 5 hosts"), std::string::npos) << e.what();
  }
  // Too big to hold and not symmetric: refused at once, with what to change.
  auto tree = parse_topology("fattree:k=48");
  coll::CollArgs big = allreduce_of(size_t{1} << 28);
  big.chunk_count = 1 << 18;
  try {
    replay(*tree, {.ranks = 16384, .ranks_per_host = 1}, big, coll::Algorithm::kBinomialTree,
           SimParams{});
    ADD_FAILURE() << "a 16384-rank tree (not symmetric) was replayed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the full replay takes up to"), std::string::npos)
        << e.what();
  }
  // Within the steps a full replay holds, but more messages than it takes on at this scale
  // (a double binary tree on 16,384 ranks, 16 MiB in 64 KiB chunks: ~8 million): refused.
  coll::CollArgs pipelined = allreduce_of(size_t{1} << 22);
  pipelined.chunk_count = size_t{1} << 14;
  try {
    replay(*tree, {.ranks = 16384, .ranks_per_host = 1}, pipelined,
           coll::Algorithm::kDoubleBinaryTree, SimParams{});
    ADD_FAILURE() << "a 16384-rank double binary tree in 256 chunks was replayed in full";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("messages"), std::string::npos) << e.what();
  }
  coll::CollArgs a = allreduce_of(8);
  a.op = coll::CollOp::kAlltoall;
  EXPECT_THROW(replay(*star, {.ranks = 4, .ranks_per_host = 1}, a,
                      coll::Algorithm::kHalvingDoubling, SimParams{}),
               Error);
}

}  // namespace
}  // namespace plait::sim

namespace plait::sim {
namespace {

// The notes' table of allreduce algorithms for p ranks and n bytes, from the very schedules
// (no pipelining): rounds of messages, and bytes each rank sends.
struct Shape {
  coll::Algorithm algo;
  int rounds;
  double bytes_per_rank;  // what every rank sends (max over ranks where they differ)
  double total_bytes;
};

TEST(Replay, AllreduceAlgorithmsHaveTheNotesStepsAndVolumes) {
  const int p = 8, log_p = 3;
  const size_t count = 1 << 20;
  const double n = count * 4.0;
  auto star = parse_topology("star:hosts=8");
  const int k = 4;  // ps roots: min(p, 4)
  for (const Shape& s : std::vector<Shape>{
           {coll::Algorithm::kNaive, 1, (p - 1) * n, p * (p - 1) * n},
           {coll::Algorithm::kRing, 2 * (p - 1), 2.0 * (p - 1) / p * n, 2.0 * (p - 1) * n},
           {coll::Algorithm::kHalvingDoubling, 2 * log_p, 2.0 * (p - 1) / p * n, 2.0 * (p - 1) * n},
           {coll::Algorithm::kRecursiveDoubling, log_p, log_p * n, p * log_p * n},
           {coll::Algorithm::kBinomialTree, 2 * log_p, log_p * n, 2.0 * (p - 1) * n},
           // k roots each own n/k: every rank sends its shards to their roots (a root keeps
           // its own), then every root sends its reduced shard to every other rank.
           {coll::Algorithm::kPs, 2, (k - 1) * n / k + (p - 1) * n / k,
            (p - k) * n + (k - 1) * n + (p - 1) * n},
       }) {
    const ReplayResult r = replay(*star, {.ranks = p, .ranks_per_host = 1}, allreduce_of(count),
                                  s.algo, SimParams{});
    const char* name = coll::to_string(s.algo).data();
    EXPECT_EQ(r.rounds, s.rounds) << name;
    double most = 0, total = 0;
    for (double b : r.sent_bytes) most = std::max(most, b), total += b;
    EXPECT_DOUBLE_EQ(most, s.bytes_per_rank) << name;
    EXPECT_DOUBLE_EQ(total, s.total_bytes) << name;
  }
}

}  // namespace
}  // namespace plait::sim

namespace plait::sim {
namespace {

// Through the ranks of host 0, a symmetric call takes exactly the time the full replay takes
// where every copy of a message gets the same rate: one rank per host, and several (their
// messages among each other over the host's memory path, the hierarchical allreduce's
// leaders and members).
TEST(SymmetricReplay, MatchesTheFullReplayWhereCopiesAreAlike) {
  struct Point {
    const char* topology;
    int ranks;
    coll::Algorithm algo;
    size_t chunk;
    const char* relabelling;
    int per_host = 1;
  };
  for (const Point& pt : std::vector<Point>{
           {"ring:hosts=8,latency=20us", 8, coll::Algorithm::kRing, 0, "shift"},
           {"ring:hosts=12", 12, coll::Algorithm::kRing, 1 << 14, "shift"},
           {"star:hosts=8", 8, coll::Algorithm::kHalvingDoubling, 0, "xor"},
           {"star:hosts=16", 16, coll::Algorithm::kRecursiveDoubling, 1 << 15, "xor"},
           {"star:hosts=10", 10, coll::Algorithm::kRing, 1 << 16, "shift"},
           {"fattree:k=4,ecmp=packet", 16, coll::Algorithm::kHalvingDoubling, 0, "xor"},
           {"star:hosts=6", 12, coll::Algorithm::kRing, 1 << 14, "shift", 2},
           {"ring:hosts=4,latency=5us", 16, coll::Algorithm::kRing, 0, "shift", 4},
           {"star:hosts=4", 16, coll::Algorithm::kHalvingDoubling, 0, "xor", 4},
           {"star:hosts=16", 16, coll::Algorithm::kHalvingDoubling, 1 << 12, "xor"},
           {"star:hosts=8", 32, coll::Algorithm::kHalvingDoubling, 1 << 13, "xor", 4},
           {"star:hosts=8", 16, coll::Algorithm::kRecursiveDoubling, 0, "xor", 2},
           {"star:hosts=4", 16, coll::Algorithm::kHierarchical, 0, "shift", 4},
           {"ring:hosts=6", 24, coll::Algorithm::kHierarchical, 0, "shift", 4},
       }) {
    auto t = parse_topology(pt.topology);
    // Blocks of equal size: with a remainder, the first ranks' blocks are larger and the
    // ranks' schedules differ (not symmetric, and refused as such).
    coll::CollArgs a = allreduce_of(static_cast<size_t>(pt.ranks) << 14);
    a.chunk_count = pt.chunk;
    const Placement place{.ranks = pt.ranks, .ranks_per_host = pt.per_host};
    const ReplayResult full = replay(*t, place, a, pt.algo, SimParams{}, ReplayMode::kFull);
    a.size = pt.ranks;
    for (int r = 0; r < pt.ranks; ++r) a.host_of.push_back(place.host_of(r));
    const auto sym =
        replay_symmetric(*t, place, a, *coll::find_algorithm(a.op, pt.algo), SimParams{});
    const std::string what = std::string(pt.topology) + " " + coll::to_string(pt.algo).data() +
                             " " + std::to_string(pt.per_host) + " per host";
    ASSERT_TRUE(sym.has_value()) << what;
    EXPECT_TRUE(sym->exact) << what;
    EXPECT_EQ(sym->relabelling, pt.relabelling) << what;
    EXPECT_NEAR(sym->result.time_s, full.time_s, full.time_s * 1e-9) << what;
    EXPECT_EQ(sym->result.messages, full.messages) << what;
    EXPECT_EQ(sym->result.rounds, full.rounds) << what;
    EXPECT_NEAR(sym->result.bottleneck_busy, full.bottleneck_busy, 1e-6) << what;
    EXPECT_NEAR(sym->result.network_bytes, full.network_bytes, 1) << what;
  }
}

// Where copies differ (a ring's neighbours on different edge switches of a fat tree have
// longer paths), rank 0 stands for the slowest: an upper bound, said to be inexact.
TEST(SymmetricReplay, SaysWhenCopiesDifferAndBoundsTheFullReplay) {
  auto t = parse_topology("fattree:k=4,ecmp=packet,latency=10us");
  coll::CollArgs a = allreduce_of(16 << 14);
  const Placement place{.ranks = 16, .ranks_per_host = 1};
  const ReplayResult full =
      replay(*t, place, a, coll::Algorithm::kRing, SimParams{}, ReplayMode::kFull);
  a.size = 16;
  for (int r = 0; r < 16; ++r) a.host_of.push_back(r);
  const auto sym = replay_symmetric(*t, place, a,
                                    *coll::find_algorithm(a.op, coll::Algorithm::kRing), SimParams{});
  ASSERT_TRUE(sym.has_value());
  EXPECT_FALSE(sym->exact);
  EXPECT_GE(sym->result.time_s, full.time_s);
  EXPECT_LT(sym->result.time_s, full.time_s * 1.05);
}

TEST(SymmetricReplay, TreesAreNotSymmetric) {
  auto star = parse_topology("star:hosts=8");
  coll::CollArgs a = allreduce_of(1 << 16);
  a.size = 8;
  const auto* tree = coll::find_algorithm(a.op, coll::Algorithm::kBinomialTree);
  EXPECT_FALSE(replay_symmetric(*star, {.ranks = 8, .ranks_per_host = 1}, a, *tree, SimParams{}));
  // Hosts holding several ranks are symmetric by host (ranks 2h and 2h+1 are ranks 0 and 1
  // relabelled), but not when the ranks do not fill the hosts evenly.
  const auto* ring = coll::find_algorithm(a.op, coll::Algorithm::kRing);
  EXPECT_TRUE(replay_symmetric(*star, {.ranks = 8, .ranks_per_host = 2}, a, *ring, SimParams{}));
  a.size = 9;
  EXPECT_FALSE(replay_symmetric(*star, {.ranks = 9, .ranks_per_host = 2}, a, *ring, SimParams{}));
}

// 16,384 ranks: far above what every rank's schedule can hold (2 x 16,383 steps each), through
// rank 0 in a second: the ring on one switch takes 2(p-1)(alpha + 2 hops + n/(p beta)), plus
// the reductions.
TEST(SymmetricReplay, SixteenThousandRanksOnOneSwitch) {
  const int p = 16384;
  auto star = parse_topology("star:hosts=16384");
  const ReplayResult r = replay(*star, {.ranks = p, .ranks_per_host = 1},
                                allreduce_of(size_t{1} << 24), coll::Algorithm::kRing, SimParams{});
  EXPECT_EQ(r.method, "symmetric (shift)");
  EXPECT_EQ(r.messages, static_cast<size_t>(2) * (p - 1) * p);
  const double n = 64.0 * (1 << 20);
  const double expect = 2.0 * (p - 1) * (5e-6 + 2e-6 + n / p / 1.25e8);
  EXPECT_GT(r.time_s, expect);
  EXPECT_LT(r.time_s, expect * 1.05);
}

}  // namespace
}  // namespace plait::sim
