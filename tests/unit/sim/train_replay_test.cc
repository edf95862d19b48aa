// `plait sim train`'s replay against steps whose times are known by hand: a pipeline of two
// stages under 1F1B and GPipe with free communication takes (m + p - 1)(F + B); a step of
// compute and one allreduce takes the compute plus the collective's own replay; and what the
// replay refuses (unknown layers, degrees that do not multiply to the ranks, programs that
// never issue a call or deadlock) it refuses with the rank and call named.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "plait/error.h"
#include "sim/replay.h"
#include "sim/topology_spec.h"
#include "sim/train/layout.h"
#include "sim/train/timeline_input.h"
#include "sim/train/train_replay.h"

namespace plait::sim::train {
namespace {

// Two dense blocks of 1 ms forward each (5e5 params x 1,000 tokens x 2 FLOP at 1e12 FLOP/s),
// hidden 1: activations of 2 KB, nothing to wait for on a terabit link with no latency.
std::string two_blocks(int pp, const std::string& schedule, int global_batch) {
  return R"({"model": {"seq": 1000, "dtype": "bf16", "layers": [
              {"kind": "dense", "count": 2, "params": 5e5, "hidden": 1}]},
            "flops_per_s": 1e12, "global_batch": )" +
         std::to_string(global_batch) + R"(, "pp": )" + std::to_string(pp) +
         R"(, "schedule": ")" + schedule + R"("})";
}

void expect_refused(const std::function<void()>& f, const std::string& says);

DagOptions free_messages(int ranks) {
  DagOptions o;
  o.sim.alpha_s = 0;
  o.sim.intra_alpha_s = 0;
  o.placement.ranks = ranks;
  return o;
}

TEST(TrainReplay, TwoStageOneFOneBTakesItsClosedForm) {
  const auto topology = parse_topology("star:hosts=2,rate=1000tbit,latency=0us");
  // Per stage F = 1 ms, B = 2 ms; 4 microbatches on 2 stages: (4 + 2 - 1) * 3 ms.
  const Layout l = parse_layout(two_blocks(2, "1f1b", 4));
  ASSERT_EQ(l.microbatches(), 4);
  const TrainResult r = replay_step(*topology, layout_step(l), free_messages(2));
  EXPECT_NEAR(r.step_s, 15e-3, 1e-6);
  ASSERT_EQ(r.ranks.size(), 2u);
  for (const RankTime& rt : r.ranks) EXPECT_NEAR(rt.compute_s, 12e-3, 1e-9);
  // Stage 0 waits (p - 1)(F + B) for gradients its peer has not sent yet: bubble, not
  // exposed communication. Stage 1 waits F for its first activations and ends 2 ms early.
  EXPECT_NEAR(r.ranks[0].bubble_s, 3e-3, 1e-6);
  EXPECT_NEAR(r.ranks[0].exposed_s, 0, 1e-6);
  EXPECT_NEAR(r.ranks[1].bubble_s, 1e-3, 1e-6);
  EXPECT_NEAR(r.ranks[1].idle_s, 2e-3, 1e-6);
  // The path ends with stage 0's last backward.
  ASSERT_FALSE(r.critical_path.empty());
  EXPECT_NE(r.critical_path.back().find("rank 0 dense L0 B mb 3"), std::string::npos)
      << r.critical_path.back();
}

TEST(TrainReplay, GPipeOfTwoStagesTakesTheSame) {
  const auto topology = parse_topology("star:hosts=2,rate=1000tbit,latency=0us");
  const TrainResult gpipe =
      replay_step(*topology, layout_step(parse_layout(two_blocks(2, "gpipe", 4))), free_messages(2));
  EXPECT_NEAR(gpipe.step_s, 15e-3, 1e-6);
}

TEST(TrainReplay, MessagesCostTheirBytesOnTheLink) {
  // Hidden 1e4: 2e7-byte activations over 1 Gbit/s, 160 ms each way, on every hop of the
  // pipeline's critical path: p - 1 forward and p - 1 backward at least.
  const auto topology = parse_topology("star:hosts=2,rate=1gbit,latency=0us");
  std::string text = two_blocks(2, "1f1b", 1);
  text.replace(text.find("\"hidden\": 1}"), 12, "\"hidden\": 10000}");
  const TrainResult r = replay_step(*topology, layout_step(parse_layout(text)), free_messages(2));
  // One microbatch: F0, send, F1, B1, send back, B0 = 1 + 160 + 1 + 2 + 160 + 2 ms (a star:
  // two links each way, max-min the slower of them, both 1 Gbit/s).
  EXPECT_NEAR(r.step_s, 326e-3, 1e-3);
  EXPECT_GT(r.busiest_busy, 0.4);
}

TEST(TrainReplay, ComputeThenAnAllreduceTakesBothAsTheCollectiveReplayDoes) {
  const auto topology = parse_topology("star:hosts=4,rate=10gbit,latency=2us");
  StepGraph g;
  g.ranks = 4;
  g.programs.resize(4);
  Call c;
  c.name = "grads";
  c.members = {0, 1, 2, 3};
  c.bytes = 8 << 20;
  c.algorithm = coll::Algorithm::kRing;
  c.chosen = true;
  c.group = 0;
  const int id = g.add_call(c);
  for (int r = 0; r < 4; ++r) {
    g.compute(r, "backward", 2e-3);
    g.issue(r, id);
    g.wait(r, id);
  }
  DagOptions o;
  o.placement.ranks = 4;
  const TrainResult step = replay_step(*topology, g, o);
  coll::CollArgs args;
  args.count = c.bytes / 4;
  args.chunk_count = o.chunk_bytes / 4;
  const ReplayResult alone =
      replay(*topology, o.placement, args, coll::Algorithm::kRing, o.sim, ReplayMode::kFull);
  EXPECT_NEAR(step.step_s, 2e-3 + alone.time_s, 1e-9);
  EXPECT_EQ(step.algorithms[0], "ring");
  for (const RankTime& rt : step.ranks) EXPECT_NEAR(rt.exposed_s, alone.time_s, 1e-9);
}

TEST(TrainReplay, ACallWithinOneHostTakesItsScheduleAloneOnTheHost) {
  // Tensor parallelism within a host: 4 ranks on host 0, one allreduce among them.
  const auto topology = parse_topology("star:hosts=2,rate=10gbit");
  StepGraph g;
  g.ranks = 4;
  g.programs.resize(4);
  Call c;
  c.name = "tp";
  c.members = {0, 1, 2, 3};
  c.bytes = 4 << 20;
  c.algorithm = coll::Algorithm::kRing;
  c.chosen = true;
  c.group = 0;
  const int id = g.add_call(c);
  for (int r = 0; r < 4; ++r) {
    g.compute(r, "attention", 1e-3 * (r + 1));  // the last member starts it at 4 ms
    g.issue(r, id);
    g.wait(r, id);
  }
  DagOptions o;
  o.placement = {.ranks = 4, .ranks_per_host = 4};
  const TrainResult step = replay_step(*topology, g, o);
  coll::CollArgs args;
  args.count = c.bytes / 4;
  args.chunk_count = o.chunk_bytes / 4;
  const ReplayResult alone =
      replay(*topology, o.placement, args, coll::Algorithm::kRing, o.sim, ReplayMode::kFull);
  EXPECT_NEAR(step.step_s, 4e-3 + alone.time_s, 1e-9);
  // Rank 0 waited 3 ms for the others (bubble), then the call's own time (exposed).
  EXPECT_NEAR(step.ranks[0].bubble_s, 3e-3, 1e-9);
  EXPECT_NEAR(step.ranks[0].exposed_s, alone.time_s, 1e-9);
  EXPECT_EQ(step.network_bytes, 0);
}

TEST(TrainReplay, TheCostModelPicksWhereTheCallDoesNot) {
  const auto topology = parse_topology("fattree:k=4,rate=100gbit");
  StepGraph g;
  g.ranks = 16;
  g.programs.resize(16);
  Call c;
  c.name = "grads";
  for (int r = 0; r < 16; ++r) c.members.push_back(r);
  c.bytes = 16 << 20;
  c.group = 0;
  const int id = g.add_call(c);
  for (int r = 0; r < 16; ++r) g.issue(r, id), g.wait(r, id);
  DagOptions o;
  o.placement.ranks = 16;
  const TrainResult step = replay_step(*topology, g, o);
  EXPECT_FALSE(step.algorithms[0].empty());
  EXPECT_NE(step.algorithms[0], "shm");
  EXPECT_GT(step.step_s, 0);
}

// Four transformer blocks under 1F1B, tp ranks of a group on one host of two.
Layout four_blocks(int dp, int tp, int pp) {
  return parse_layout(R"({"model": {"seq": 512, "dtype": "bf16", "layers": [
      {"kind": "transformer", "count": 4, "hidden": 512, "ffn": 2048}]},
      "flops_per_s": 1e12, "global_batch": 8, "schedule": "1f1b", "dp": )" +
                          std::to_string(dp) + ", \"tp\": " + std::to_string(tp) +
                          ", \"pp\": " + std::to_string(pp) + "}",
                      dp * tp * pp);
}

DagOptions two_a_host(int ranks) {
  DagOptions o;
  o.placement = {.ranks = ranks, .ranks_per_host = 2};
  return o;
}

TEST(TrainReplay, ATensorParallelGroupThroughItsFirstRankIsExactOnAStar) {
  // 2 x 2 x 2 (dp, tp, pp) on 4 hosts of 2 ranks: the TP pairs share a host, DP and the
  // pipeline cross the star, where a rank's copy takes the same links as the rank.
  const Layout l = four_blocks(2, 2, 2);
  const auto topology = parse_topology("star:hosts=4,rate=10gbit");
  const DagOptions o = two_a_host(8);
  const StepGraph full = layout_step(l);
  const StepGraph copies = layout_step(l, LayoutReplay::kTpCopies);
  ASSERT_EQ(full.ranks, 8);
  ASSERT_EQ(copies.ranks, 4);
  ASSERT_EQ(copies.copies, 2);
  const TrainResult a = replay_step(*topology, full, o);
  const TrainResult b = replay_step(*topology, copies, o);
  EXPECT_NEAR(b.step_s, a.step_s, a.step_s * 1e-9);
  EXPECT_NEAR(b.network_bytes, a.network_bytes, 1);
  EXPECT_LT(b.nodes, a.nodes);
  EXPECT_GT(a.network_bytes, 0);
}

TEST(TrainReplay, OnePipelineStandingForTheOthersIsExactOnAStar) {
  // 4 x 2 x 2 (dp, tp, pp) on 8 hosts of 2 ranks, the DP allreduces a ring, halving-
  // doubling or a double binary tree across the 4 replicas: through one pipeline (2 ranks,
  // each for 8), every replica's messages are its images under the ring's shift (or the
  // hypercube's xor).
  const Layout l = four_blocks(4, 2, 2);
  const auto topology = parse_topology("star:hosts=8,rate=10gbit");
  const DagOptions o = two_a_host(16);
  const StepGraph full = layout_step(l);
  const StepGraph one = layout_step(l, LayoutReplay::kOnePipeline);
  ASSERT_EQ(one.ranks, 2);
  ASSERT_EQ(one.copies, 8);
  // A double binary tree has no such symmetry: every replica's tree steps are replayed on
  // the one pipeline, each standing for its TP copies.
  for (coll::Algorithm a : {coll::Algorithm::kRing, coll::Algorithm::kHalvingDoubling,
                            coll::Algorithm::kDoubleBinaryTree}) {
    StepGraph f = full, p = one;
    for (Call& c : f.calls)
      if (c.name.starts_with("dp")) c.algorithm = a, c.chosen = true;
    for (Call& c : p.calls)
      if (c.name.starts_with("dp")) c.algorithm = a, c.chosen = true;
    const TrainResult x = replay_step(*topology, f, o);
    const TrainResult y = replay_step(*topology, p, o);
    EXPECT_NEAR(y.step_s, x.step_s, x.step_s * 1e-6) << coll::to_string(a);
    EXPECT_NEAR(y.network_bytes, x.network_bytes, 1) << coll::to_string(a);
    EXPECT_LT(y.nodes, x.nodes);
  }
}

void expect_refused(const std::function<void()>& f, const std::string& says) {
  try {
    f();
    ADD_FAILURE() << "not refused; expected: " << says;
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(TrainLayout, RefusesWhatIsNotAJob) {
  std::string unknown = two_blocks(2, "1f1b", 4);
  unknown.replace(unknown.find("\"dense\""), 7, "\"conv3d\"");
  expect_refused([&] { parse_layout(unknown); }, "layer 0: unknown kind \"conv3d\"");
  // dp 1 x tp 1 x pp 2 = 2 ranks, asked for 8.
  expect_refused([&] { parse_layout(two_blocks(2, "1f1b", 4), 8); }, "= 2 ranks, not the 8");
  expect_refused([&] { parse_layout(two_blocks(4, "1f1b", 4)); }, "2 blocks cannot fill 4");
  expect_refused([&] { parse_layout(two_blocks(2, "pipedream", 4)); }, "no schedule");
  expect_refused([&] { parse_layout("{\"model\": 3"); }, "not JSON");
  const Layout l = parse_layout(two_blocks(1, "1f1b", 4));
  expect_refused([&] { with_degrees(l, 3, 1, 1, 1, "1f1b"); }, "does not split");
  expect_refused([&] { with_degrees(l, 4, 1, 1, 2, "1f1b"); }, "without a moe layer");
  expect_refused([&] { with_degrees(l, 4, 1, 1, 3, "1f1b"); }, "ep 3 does not divide dp 4");
}

TEST(TrainGraph, RefusesProgramsThatCannotRun) {
  const auto topology = parse_topology("star:hosts=2");
  DagOptions o;
  o.placement.ranks = 2;
  StepGraph g;
  g.ranks = 2;
  g.programs.resize(2);
  Call c;
  c.name = "grads";
  c.members = {0, 1};
  c.bytes = 1024;
  c.group = 0;
  const int a = g.add_call(c);
  g.issue(0, a);
  expect_refused([&] { replay_step(*topology, g, o); },
                 "rank 1 never issues call 0 (grads)");
  g.wait(1, a);
  expect_refused([&] { replay_step(*topology, g, o); },
                 "rank 1 waits for call 0 (grads) before it issues it");

  // Two calls of one group issued in opposite orders: each rank's second call waits for its
  // first, which waits for the other rank's second.
  StepGraph d;
  d.ranks = 2;
  d.programs.resize(2);
  const int x = d.add_call(c);
  c.name = "params";
  const int y = d.add_call(c);
  d.issue(0, x), d.issue(0, y), d.wait(0, y);
  d.issue(1, y), d.issue(1, x), d.wait(1, x);
  expect_refused([&] { replay_step(*topology, d, o); }, "deadlock");
}

// A trace as plait.torch.timeline writes it (timeline_render.perfetto): two ranks, a step of
// 1 ms forward, an allreduce issued in backward and waited for at its end, and a message.
std::string trace(bool with_members) {
  auto call = [&](int pid, const std::string& op, double ts, double issued, double wait_b,
                  double wait_d, int peer) {
    std::string args = "\"bytes\": 4096, \"group\": \"default\", \"algorithm\": \"ring\"";
    if (peer >= 0) args += ", \"peer\": " + std::to_string(peer) + ", \"tag\": 0";
    if (with_members)
      args += ", \"members\": [0, 1], \"issued\": " + std::to_string(issued) +
              ", \"waits\": [[" + std::to_string(wait_b) + ", " + std::to_string(wait_d) + "]]";
    return "{\"ph\": \"X\", \"name\": \"" + op + "\", \"pid\": " + std::to_string(pid) +
           ", \"tid\": " + (peer >= 0 ? "2" : "1") + ", \"ts\": " + std::to_string(ts) +
           ", \"dur\": 50, \"args\": {" + args + "}}";
  };
  std::string events;
  for (int r = 0; r < 2; ++r) {
    events += "{\"ph\": \"X\", \"name\": \"step 0\", \"pid\": " + std::to_string(r) +
              ", \"tid\": 4, \"ts\": 0, \"dur\": 4000},";
    events += "{\"ph\": \"X\", \"name\": \"forward\", \"pid\": " + std::to_string(r) +
              ", \"tid\": 0, \"ts\": 0, \"dur\": 1000},";
    events += "{\"ph\": \"X\", \"name\": \"backward\", \"pid\": " + std::to_string(r) +
              ", \"tid\": 0, \"ts\": 1000, \"dur\": 2000},";
    events += call(r, "all_reduce", 2500, 2500, 3000, 100, -1) + ",";
  }
  events += call(0, "send", 3200, 3200, 3200, 10, 1) + ",";
  events += call(1, "recv", 3200, 3200, 3200, 10, 0);
  return "{\"traceEvents\": [" + events + "], \"displayTimeUnit\": \"ms\"}";
}

TEST(TrainTimeline, ARecordedStepBecomesEachRanksProgram) {
  const RecordedStep s = read_timeline(trace(true));
  EXPECT_EQ(s.steps, 1);
  EXPECT_NEAR(s.measured_s, 4e-3, 1e-9);
  ASSERT_EQ(s.graph.ranks, 2);
  ASSERT_EQ(s.graph.calls.size(), 2u);  // the allreduce and the message
  EXPECT_EQ(s.graph.calls[0].algorithm, coll::Algorithm::kRing);
  EXPECT_TRUE(s.graph.calls[0].chosen);
  EXPECT_TRUE(s.graph.calls[1].p2p);
  double compute = 0;
  for (const Task& t : s.graph.programs[0])
    if (t.kind == TaskKind::kCompute) compute += t.seconds;
  // The step's 4 ms less the 0.1 ms and 0.01 ms waits.
  EXPECT_NEAR(compute, 4e-3 - 0.11e-3, 1e-9);
  DagOptions o = free_messages(2);
  const TrainResult r = replay_step(*parse_topology("star:hosts=2,rate=100gbit,latency=0us"), s.graph, o);
  // The waits were the only communication: free messages leave the thread's own time.
  EXPECT_NEAR(r.step_s, 4e-3 - 0.11e-3, 1e-5);
}

TEST(TrainTimeline, RefusesTracesItCannotReplay) {
  expect_refused([] { read_timeline(trace(false)); }, "record it again");
  expect_refused([] { read_timeline("{\"traceEvents\": []}"); }, "no ranks recorded");
  expect_refused([] { read_timeline(trace(true), 3); }, "step 3 of 1 recorded");
}

}  // namespace
}  // namespace plait::sim::train
