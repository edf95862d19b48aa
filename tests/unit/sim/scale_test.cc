// The simulator at scale: a change re-solves only the flows that share links with it, the
// full replay takes on what that makes cheap (a parameter server, pipelined trees at 16,384
// ranks) and stops, saying why, where every flow shares links with every other.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>

#include "coll/select/algorithms.h"
#include "plait/error.h"
#include "sim/flow_network.h"
#include "sim/replay.h"
#include "sim/symmetric_replay.h"
#include "sim/topology_spec.h"
#include "support/sim_calls.h"

namespace plait::sim {
namespace {

TEST(FlowNetwork, AChangeReSolvesTheFlowsLinkedToItAndNoOthers) {
  // Link 0 (4 B/s) carries A and B; link 1 (10 B/s) B and C; link 2 (10 B/s) D alone.
  // A and B get 2 each on link 0, C the 8 B leaves on link 1, D its 10.
  FlowNetwork net({4.0, 10.0, 10.0});
  const int a = net.add(2, {0});
  const int b = net.add(100, {0, 1});
  const int c = net.add(100, {1});
  const int d = net.add(100, {2});
  EXPECT_DOUBLE_EQ(net.next_finish(), 1.0);  // A: 2 B at 2 B/s
  EXPECT_DOUBLE_EQ(net.rate(c), 8.0);
  EXPECT_DOUBLE_EQ(net.solved(), 4.0);
  net.advance(1.0);
  EXPECT_EQ(net.take_finished(), std::vector<int>{a});
  // A's end reaches C through B (B takes link 0's 4, C the 6 left on link 1); D is not
  // linked to A: its rate stands and it is not solved again.
  net.next_finish();
  EXPECT_DOUBLE_EQ(net.rate(b), 4.0);
  EXPECT_DOUBLE_EQ(net.rate(c), 6.0);
  EXPECT_DOUBLE_EQ(net.rate(d), 10.0);
  EXPECT_DOUBLE_EQ(net.solved(), 6.0);
  // D drains at 10 B/s throughout: 100 B by 10 s; the bytes each link carried add up.
  net.advance(10.0);
  const std::vector<int> done = net.take_finished();
  EXPECT_EQ(done, std::vector<int>{d});
  EXPECT_DOUBLE_EQ(net.link_bytes()[2], 100.0);
  EXPECT_DOUBLE_EQ(net.link_bytes()[0], 2 + 2 + 4 * 9.0);  // A's 2, B's 2 + 36
}

TEST(FlowNetwork, ReSolvingAComponentGivesTheRatesOfAWholeSolve) {
  // Flows start, end and change priority on 12 links; after every change each active flow's
  // rate equals the rate a network solving all of them from scratch gives it.
  std::mt19937 rng(7);
  std::vector<double> capacity;
  for (int l = 0; l < 12; ++l) capacity.push_back(1 + static_cast<double>(rng() % 10));
  FlowNetwork net(capacity);
  struct Active {
    std::vector<int> links;
    int priority;
  };
  std::map<int, Active> active;
  for (int step = 0; step < 400; ++step) {
    const unsigned what = rng() % 10;
    if (what < 5 || active.empty()) {
      std::set<int> links;
      for (unsigned n = 1 + rng() % 3; links.size() < n;) links.insert(static_cast<int>(rng() % 12));
      Active a{{links.begin(), links.end()}, rng() % 4 == 0 ? 1 : 0};
      active[net.add(1 + static_cast<double>(rng() % 50), a.links, a.priority)] = a;
    } else if (what < 6) {
      auto it = std::next(active.begin(), static_cast<long>(rng() % active.size()));
      it->second.priority = 1 - it->second.priority;
      net.set_priority(it->first, it->second.priority);
    } else {
      net.advance(net.next_finish());
      for (int f : net.take_finished()) active.erase(f);
    }
    net.next_finish();
    FlowNetwork whole(capacity);
    std::map<int, int> twin;
    for (const auto& [id, a] : active) twin[id] = whole.add(1e9, a.links, a.priority);
    whole.next_finish();
    for (const auto& [id, a] : active)
      ASSERT_NEAR(net.rate(id), whole.rate(twin[id]), 1e-9) << "flow " << id << " step " << step;
  }
}

TEST(FlowNetwork, AFastFlowLateInALongCallEndsWhenItIsDue) {
  // A million seconds in, a time has ~1e-10 s of resolution: a memory path's 5 GB/s moves
  // ~0.5 B in it, more than the rounding a flow is allowed. Its end must still come when due
  // (a parameter server of 16,384 ranks spun here forever).
  FlowNetwork net({5e9});
  net.advance(1e6);
  const int f = net.add(1e9 + 123.456, {0});
  std::vector<int> done;
  for (int i = 0; i < 3 && done.empty(); ++i) {
    const double t = net.next_finish();
    ASSERT_LT(t, FlowNetwork::kNever);
    net.advance(t);
    done = net.take_finished();
  }
  EXPECT_EQ(done, std::vector<int>{f});
  EXPECT_NEAR(net.now(), 1e6 + (1e9 + 123.456) / 5e9, 1e-9);
  EXPECT_DOUBLE_EQ(net.link_bytes()[0], 1e9 + 123.456);
}

TEST(FlowNetwork, AWeightedFlowIsItsIdenticalFlowsSolvedAsOne) {
  // Three identical flows as one of weight 3 beside a fourth on a 10 B/s link: 2.5 B/s each,
  // as four flows; one on a second link of 1 B/s is held there, and the others share the 9 left.
  FlowNetwork net({10.0, 1.0});
  const int three = net.add(5, {0}, 0, 3);
  const int one = net.add(5, {0});
  EXPECT_DOUBLE_EQ(net.next_finish(), 2.0);
  EXPECT_DOUBLE_EQ(net.rate(three), 2.5);
  EXPECT_DOUBLE_EQ(net.rate(one), 2.5);
  net.advance(2.0);
  EXPECT_EQ(net.take_finished().size(), 2u);
  EXPECT_DOUBLE_EQ(net.link_bytes()[0], 4 * 5.0);  // every flow the weight stands for
  const int slow = net.add(10, {0, 1});
  const int rest = net.add(10, {0}, 0, 3);
  net.next_finish();
  EXPECT_DOUBLE_EQ(net.rate(slow), 1.0);
  EXPECT_DOUBLE_EQ(net.rate(rest), 3.0);
}

TEST(FlowNetwork, AnIdIsReusedOnceTheCallerIsDoneWithIt) {
  // Ids come back from take_finished(); the caller may add flows while it goes through them,
  // so an id is free only from the next call on (a replay of millions of messages holds only
  // the flows in flight).
  FlowNetwork net({1.0});
  const int a = net.add(1, {0});
  net.advance(net.next_finish());
  EXPECT_EQ(net.take_finished(), std::vector<int>{a});
  const int b = net.add(1, {0});
  EXPECT_NE(b, a);
  EXPECT_TRUE(net.take_finished().empty());
  const int c = net.add(1, {0});
  EXPECT_EQ(c, a);
  EXPECT_EQ(net.capacity(), 2u);
  // The reused id is a flow of its own: a fresh rate and end, none of its old life's.
  EXPECT_DOUBLE_EQ(net.next_finish(), 1.0 + 2.0);  // b and c share the link from t = 1
  EXPECT_DOUBLE_EQ(net.rate(c), 0.5);
}

TEST(SymmetricReplay, AFastMessageLateInALongCallEndsWhenItIsDue) {
  // 16 MiB over 10 Mbit/s links: the call lasts 80 s, and a message between two ranks of one
  // host (5 GB/s) ends where a time has too few bits for its last bytes. The symmetric replay
  // asked for that time again, forever (halving-doubling of 1 GiB on a dragonfly: a "more
  // than 60 s" in the projections).
  auto star = parse_topology("star:hosts=4,rate=10mbit");
  coll::CollArgs a = allreduce_of(size_t{1} << 22);
  a.chunk_count = size_t{1} << 18;
  const Placement place{.ranks = 16, .ranks_per_host = 4};
  const ReplayResult symmetric = replay(*star, place, a, coll::Algorithm::kHalvingDoubling,
                                        SimParams{}, ReplayMode::kSymmetric);
  EXPECT_EQ(symmetric.method, "symmetric (xor)");
  const ReplayResult full = replay(*star, place, a, coll::Algorithm::kHalvingDoubling,
                                   SimParams{}, ReplayMode::kFull);
  EXPECT_GT(full.time_s, 60);
  EXPECT_NEAR(symmetric.time_s, full.time_s, full.time_s * 1e-9);
}

TEST(Replay, AParameterServerOfSixteenThousandRanksIsReplayedInFull) {
  // Its four roots hold 16,383 steps each; sampled, rank 0 stood for 256 ranks and the call
  // looked 30 times its size. Every non-root sends its 4 shards to the roots (a root 3), and
  // every root its reduced shard back to the 16,383 others.
  auto star = parse_topology("star:hosts=16384");
  const int p = 16384, k = 4;
  const ReplayResult r = replay(*star, {.ranks = p, .ranks_per_host = 1}, allreduce_of(1024),
                                coll::Algorithm::kPs, SimParams{});
  EXPECT_EQ(r.method, "full");
  EXPECT_EQ(r.messages, static_cast<size_t>((p - k) * k + k * (k - 1) + k * (p - 1)));
  EXPECT_EQ(r.rounds, 2);
}

TEST(Replay, AFullReplayWhoseFlowsAllShareLinksStopsAndSaysWhy) {
  // Halving-doubling on a fat tree hashing flows: every round's far exchanges cross the core,
  // so each message re-solves ~every flow in flight.
  auto tree = parse_topology("fattree:k=8");
  SimParams params;
  const Placement placement{.ranks = 64, .ranks_per_host = 1};
  const ReplayResult whole = replay(*tree, placement, allreduce_of(1 << 16),
                                    coll::Algorithm::kHalvingDoubling, params, ReplayMode::kFull);
  EXPECT_GT(whole.time_s, 0);
  params.max_flows_solved = 1000;
  try {
    replay(*tree, placement, allreduce_of(1 << 16), coll::Algorithm::kHalvingDoubling, params,
           ReplayMode::kFull);
    ADD_FAILURE() << "a replay past its budget of re-solved flows ran on";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("halving_doubling allreduce on 64 ranks"), std::string::npos) << what;
    EXPECT_NE(what.find("the most it takes: 1000"), std::string::npos) << what;
    EXPECT_NE(what.find("--replay symmetric"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace plait::sim
