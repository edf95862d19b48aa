#include "coll/stall/stall_report.h"
#include "core/rank_list.h"

#include <gtest/gtest.h>

namespace plait::coll {
namespace {

RankState in(uint64_t seq, CollOp op, double waited, uint64_t count = 4194304) {
  RankState s;
  s.answered = true;
  s.in_collective = true;
  s.started = true;
  s.current = Signature{.seq = seq, .op = op, .dtype = DataType::kF32, .redop = ReduceOp::kSum,
                        .root = op == CollOp::kBroadcast ? 0 : -1, .count = count};
  s.waited_s = waited;
  return s;
}

RankState idle_after(uint64_t seq, CollOp op) {
  RankState s = in(seq, op, 0);
  s.in_collective = false;
  return s;
}

TEST(StallReport, StatesRoundTripAndGarbageIsRefused) {
  const RankState s = in(1043, CollOp::kBroadcast, 12.345, 7);
  auto back = decode_state(encode_state(s));
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->in_collective);
  EXPECT_EQ(back->current.seq, 1043u);
  EXPECT_EQ(back->current.op, CollOp::kBroadcast);
  EXPECT_EQ(back->current.root, 0);
  EXPECT_EQ(back->current.count, 7u);
  EXPECT_NEAR(back->waited_s, 12.345, 0.001);
  RankState none;
  none.answered = true;
  auto none_back = decode_state(encode_state(none));
  ASSERT_TRUE(none_back);
  EXPECT_FALSE(none_back->started);
  EXPECT_FALSE(none_back->in_collective);
  for (const char* bad : {"", "C", "X 1 0 0 0 0 0 0", "C 1 0 0 0 0 0", "C 1 0 0 0 0 0 0 9",
                          "C 1 99 0 0 0 0 0", "C 1 0 0 0 0 0 -5", "C 1 0 0 0 0 0 0x"})
    EXPECT_FALSE(decode_state(bad)) << bad;
}

TEST(StallReport, RankListsJoinRuns) {
  EXPECT_EQ(rank_list({6, 0, 1, 2, 3, 4}), "0-4, 6");
  EXPECT_EQ(rank_list({5, 7}), "5, 7");
  EXPECT_EQ(rank_list({1, 2}), "1, 2");
  EXPECT_EQ(rank_list({3}), "3");
}

TEST(StallReport, NamesWhoHasNotCalledItAndWhatTheyAreIn) {
  std::vector<RankState> states(9);
  for (int r : {0, 1, 2, 3, 4, 6}) states[r] = in(1043, CollOp::kAllreduce, 10.2);
  states[5] = idle_after(1042, CollOp::kAllreduce);
  states[7] = in(1042, CollOp::kBroadcast, 10.0, 1);
  // states[8] never answered
  EXPECT_EQ(stall_summary(states),
            "allreduce #1043 (count 4194304, f32, sum) has waited 10.2 s on ranks 0-4, 6; "
            "ranks 5, 7, 8 have not called it: rank 5 is in no collective (the last it "
            "finished: allreduce #1042 (count 4194304, f32, sum)); rank 7 is in broadcast #1042 "
            "(count 1, f32, root 0) for 10.0 s; rank 8 did not answer (stopped, hung, or cut "
            "off from the store)");
}

TEST(StallReport, TheFirstCollectiveIsNumberZero) {
  std::vector<RankState> states(2);
  states[0] = in(0, CollOp::kAllreduce, 2.0, 8);
  states[1].answered = true;
  EXPECT_EQ(stall_summary(states),
            "allreduce #0 (count 8, f32, sum) has waited 2.0 s on rank 0; rank 1 has not "
            "called it: rank 1 is in no collective (none finished yet)");
}

TEST(StallReport, EveryRankInItMeansTheDataIsNotMoving) {
  std::vector<RankState> states(2, in(7, CollOp::kAllreduce, 3.0, 8));
  EXPECT_EQ(stall_summary(states),
            "allreduce #7 (count 8, f32, sum) has waited 3.0 s on ranks 0, 1, every rank of "
            "the communicator: all called it, and its data is not moving (a lost or slow "
            "link, or a rank whose progress is stuck)");
}

TEST(StallReport, NoCollectiveAnywhere) {
  std::vector<RankState> states(3);
  states[0] = idle_after(3, CollOp::kBarrier);
  states[1].answered = true;
  EXPECT_EQ(stall_summary(states),
            "no rank is in a collective: rank 0 is in no collective (the last it finished: "
            "barrier #3 (count 4194304, f32)); rank 1 is in no collective (none finished yet); "
            "rank 2 did not answer (stopped, hung, or cut off from the store)");
}

}  // namespace
}  // namespace plait::coll
