// The checker must catch what it promises to catch: races (including through in-place
// aliasing), mismatched messages, out-of-bounds slices, bad dependencies, writes to the
// input of an out-of-place call, and deadlocks (rendezvous ones included). Each defect is
// planted in an otherwise valid hand-made schedule, next to the valid version.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "coll/schedule/builder.h"
#include "coll/schedule/check.h"
#include "coll/select/algorithms.h"

namespace plait::coll {
namespace {

Slice in(size_t off, size_t n) { return {BufferId::kInput, off, n}; }
Slice out(size_t off, size_t n) { return {BufferId::kOutput, off, n}; }
Slice scratch(size_t off, size_t n) { return {BufferId::kScratch, off, n}; }

std::vector<CollArgs> ranks(CollOp op, int size, size_t count, bool in_place = false) {
  std::vector<CollArgs> v;
  for (int r = 0; r < size; ++r) {
    CollArgs a;
    a.op = op;
    a.rank = r;
    a.size = size;
    a.count = count;
    a.dtype = DataType::kI32;
    a.in_place = in_place;
    v.push_back(a);
  }
  return v;
}

// Two-rank allreduce of 4 elements: each rank sends its input, receives the other's into
// scratch, copies its own input to the output and adds the received vector.
// `reduce_after_recv` false plants the race: the reduce may read scratch mid-receive.
std::vector<Schedule> two_rank_allreduce(bool reduce_after_recv) {
  std::vector<Schedule> s(2);
  for (int r = 0; r < 2; ++r) {
    Schedule& x = s[r];
    x.alloc_scratch(4);
    x.send(1 - r, in(0, 4));
    StepId got = x.recv(1 - r, scratch(0, 4));
    StepId copied = x.copy(in(0, 4), out(0, 4));
    if (reduce_after_recv || r == 1) {
      x.reduce(scratch(0, 4), out(0, 4), {got, copied});
    } else {
      x.reduce(scratch(0, 4), out(0, 4), {copied});
    }
  }
  return s;
}

struct Buffers {
  std::vector<std::vector<int32_t>> input, output;
  std::vector<RankBuffers> spans;
  Buffers(int size, size_t in_count, size_t out_count) : input(size), output(size), spans(size) {
    for (int r = 0; r < size; ++r) {
      input[r].assign(in_count, 0);
      for (size_t i = 0; i < in_count; ++i) input[r][i] = static_cast<int32_t>(10 * r + i);
      output[r].assign(out_count, -1);
      spans[r].input = std::as_writable_bytes(std::span<int32_t>(input[r]));
      spans[r].output = std::as_writable_bytes(std::span<int32_t>(output[r]));
    }
  }
};

TEST(ScheduleCheck, ValidScheduleRunsAndComputes) {
  auto args = ranks(CollOp::kAllreduce, 2, 4);
  auto s = two_rank_allreduce(true);
  Buffers b(2, 4, 4);
  CheckResult res = check_schedules(args, s, b.spans);
  ASSERT_TRUE(res) << res.error;
  EXPECT_EQ(res.executed, res.steps);
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(b.output[r][i], static_cast<int32_t>(10 + 2 * i));
  }
}

TEST(ScheduleCheck, CatchesUnorderedReadOfAReceiveBuffer) {
  auto args = ranks(CollOp::kAllreduce, 2, 4);
  CheckResult res = validate_schedules(args, two_rank_allreduce(false));
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("data race on rank 0"), std::string::npos) << res.error;
  EXPECT_NE(res.error.find("scratch[0,4)"), std::string::npos) << res.error;
  // Without the race check the same schedule passes the structural checks.
  EXPECT_TRUE(validate_schedules(args, two_rank_allreduce(false), /*check_races=*/false));
}

TEST(ScheduleCheck, CatchesRaceThroughInPlaceAliasing) {
  // Allgather in place, 2 ranks x 2 elements: rank 0's input is out[0,2). Receiving rank 1's
  // block into out[0,2) (the wrong block) while sending the input reads the same elements.
  auto args = ranks(CollOp::kAllgather, 2, 2, /*in_place=*/true);
  std::vector<Schedule> s(2);
  s[0].send(1, in(0, 2));
  s[0].recv(1, out(0, 2));
  s[1].send(0, in(0, 2));
  s[1].recv(0, out(0, 2));
  CheckResult res = validate_schedules(args, s);
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("data race on rank 0"), std::string::npos) << res.error;
  // Rank 1's input is out[2,4), so on rank 1 the same two steps do not conflict.
  s[0].steps[1].dst = out(2, 2);
  EXPECT_TRUE(validate_schedules(args, s)) << validate_schedules(args, s).error;
}

TEST(ScheduleCheck, CatchesStrippedDependenciesInABuiltSchedule) {
  auto args = ranks(CollOp::kAllreduce, 4, 64, /*in_place=*/true);
  std::vector<Schedule> s;
  for (auto& a : args) {
    a.chunk_count = 8;
    s.push_back(find_algorithm(a.op, Algorithm::kRing)->build(a));
  }
  ASSERT_TRUE(validate_schedules(args, s));
  for (Step& st : s[2].steps) st.dep_count = 0;
  CheckResult res = validate_schedules(args, s);
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("data race on rank 2"), std::string::npos) << res.error;
}

TEST(ScheduleCheck, CatchesMismatchedElementCounts) {
  auto args = ranks(CollOp::kAllreduce, 2, 4);
  auto s = two_rank_allreduce(true);
  s[1].steps[1].dst = scratch(0, 3);  // rank 1 expects 3 of the 4 elements rank 0 sends
  CheckResult res = validate_schedules(args, s);
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("sends 4 elements"), std::string::npos) << res.error;
  EXPECT_NE(res.error.find("expects 3"), std::string::npos) << res.error;
}

TEST(ScheduleCheck, CatchesMismatchedMessageCounts) {
  auto args = ranks(CollOp::kAllreduce, 2, 4);
  auto s = two_rank_allreduce(true);
  s[0].send(1, in(0, 4));  // one more message than rank 1 receives
  CheckResult res = validate_schedules(args, s);
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("rank 0 sends 2 messages to rank 1, which posts 1"), std::string::npos)
      << res.error;
}

TEST(ScheduleCheck, CatchesOutOfBoundsSlices) {
  auto args = ranks(CollOp::kAllreduce, 2, 4);
  auto s = two_rank_allreduce(true);
  s[1].steps[2].dst = out(2, 4);  // the output has 4 elements
  CheckResult res = validate_schedules(args, s);
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("rank 1 step 2"), std::string::npos) << res.error;
  EXPECT_NE(res.error.find("out[2,+4) is outside the buffer's 4 elements"), std::string::npos)
      << res.error;

  s = two_rank_allreduce(true);
  s[0].scratch_count = 2;  // scratch slices reach element 4
  res = validate_schedules(args, s);
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("scratch[0,+4) is outside"), std::string::npos) << res.error;

  // Broadcast non-roots have no input at all.
  auto bargs = ranks(CollOp::kBroadcast, 2, 4);
  std::vector<Schedule> b(2);
  b[0].send(1, in(0, 4));
  b[1].recv(0, out(0, 4));
  b[1].copy(in(0, 4), out(0, 4));
  res = validate_schedules(bargs, b);
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("in[0,+4) is outside the buffer's 0 elements"), std::string::npos)
      << res.error;
}

TEST(ScheduleCheck, CatchesWritesToTheInputOutOfPlace) {
  auto args = ranks(CollOp::kAllreduce, 2, 4);
  auto s = two_rank_allreduce(true);
  s[0].steps[1].dst = in(0, 4);
  CheckResult res = validate_schedules(args, s);
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("writes the input of an out-of-place call"), std::string::npos)
      << res.error;
}

TEST(ScheduleCheck, CatchesBadDependenciesAndPeers) {
  auto args = ranks(CollOp::kAllreduce, 2, 4);
  auto s = two_rank_allreduce(true);
  s[0].deps[0] = 3;  // the reduce (step 3) now depends on itself
  CheckResult res = validate_schedules(args, s);
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("depends on step 3, which is not earlier"), std::string::npos)
      << res.error;

  s = two_rank_allreduce(true);
  s[1].steps[0].peer = 1;  // to itself
  res = validate_schedules(args, s);
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("peer 1 is not another rank"), std::string::npos) << res.error;
}

TEST(ScheduleCheck, ReportsDeadlockWithRanksAndSteps) {
  // Each rank sends only after receiving from the other: nobody goes first.
  auto args = ranks(CollOp::kAllreduce, 2, 4);
  std::vector<Schedule> s(2);
  for (int r = 0; r < 2; ++r) {
    StepId got = s[r].recv(1 - r, out(0, 4));
    s[r].send(1 - r, in(0, 4), {got});
  }
  Buffers b(2, 4, 4);
  ASSERT_TRUE(validate_schedules(args, s));
  CheckResult res = check_schedules(args, s, b.spans);
  ASSERT_FALSE(res);
  EXPECT_EQ(res.executed, 0u);
  EXPECT_NE(res.error.find("deadlock"), std::string::npos) << res.error;
  EXPECT_NE(res.error.find("rank 0: 2 steps left"), std::string::npos) << res.error;
  EXPECT_NE(res.error.find("rank 1: 2 steps left"), std::string::npos) << res.error;
  EXPECT_NE(res.error.find("step 0 (recv from 1 out[0,+4)) is posted"), std::string::npos)
      << res.error;
}

TEST(ScheduleCheck, SendsAreRendezvousNotEager) {
  // Both ranks send first and receive only once their send completed. With eager sends
  // this would run; with rendezvous (a send completes when its receive is posted) it
  // cannot, and a schedule must not rely on the transport buffering.
  auto args = ranks(CollOp::kAllreduce, 2, 4);
  std::vector<Schedule> s(2);
  for (int r = 0; r < 2; ++r) {
    StepId sent = s[r].send(1 - r, in(0, 4));
    s[r].recv(1 - r, out(0, 4), {sent});
  }
  Buffers b(2, 4, 4);
  CheckResult res = check_schedules(args, s, b.spans);
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("deadlock"), std::string::npos) << res.error;
  EXPECT_NE(res.error.find("waits for step 0"), std::string::npos) << res.error;
}

TEST(ScheduleCheck, RejectsInconsistentCallsAndSmallBuffers) {
  auto args = ranks(CollOp::kAllreduce, 2, 4);
  auto s = two_rank_allreduce(true);
  args[1].count = 5;
  EXPECT_NE(validate_schedules(args, s).error.find("different call"), std::string::npos);
  args = ranks(CollOp::kAllreduce, 2, 4);
  Buffers b(2, 4, 3);  // outputs one element short
  CheckResult res = check_schedules(args, s, b.spans);
  ASSERT_FALSE(res);
  EXPECT_NE(res.error.find("output buffer has 12 bytes, the layout needs 16"), std::string::npos)
      << res.error;
}

TEST(ScheduleCheck, RandomOrdersAgree) {
  // The same valid schedules under many pick orders give the same answer.
  auto args = ranks(CollOp::kAllreduce, 5, 37);
  std::vector<Schedule> s;
  for (auto& a : args) {
    a.chunk_count = 4;
    s.push_back(find_algorithm(a.op, Algorithm::kHalvingDoubling)->build(a));
  }
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Buffers b(5, 37, 37);
    CheckOptions opt;
    opt.seed = seed;
    opt.check_races = seed == 1;
    CheckResult res = check_schedules(args, s, b.spans, opt);
    ASSERT_TRUE(res) << res.error;
    for (int r = 0; r < 5; ++r) {
      for (size_t i = 0; i < 37; ++i) {
        ASSERT_EQ(b.output[r][i], static_cast<int32_t>(100 + 5 * i)) << "seed " << seed;
      }
    }
  }
}

}  // namespace
}  // namespace plait::coll
