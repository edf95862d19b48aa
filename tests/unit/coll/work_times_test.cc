// CallOptions::timed: a Work says when plait started and finished the call (Work::times()),
// what plait.torch.timeline builds its picture from; untimed calls leave the times unset. One
// rank; timed sends and receives are checked on real ranks (multiproc/coll/p2p_split_test.cc).
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "plait/plait.h"

namespace plait {
namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<Communicator> single_rank() {
  Bootstrap b;
  b.rank = 0;
  b.size = 1;
  b.store = make_hash_store();
  return Communicator::create(b);
}

TEST(WorkTimes, ATimedCollectiveStartsAndFinishesWithinTheCall) {
  auto comm = single_rank();
  std::vector<float> x(1024, 1.0f);
  const auto before = Clock::now();
  auto work = comm->allreduce(x.data(), x.data(), x.size(), DataType::kF32, ReduceOp::kSum,
                              {.timed = true});
  work->wait();
  const auto after = Clock::now();
  const WorkTimes t = work->times();
  EXPECT_LE(before, t.started);
  EXPECT_LE(t.started, t.finished);
  EXPECT_LE(t.finished, after);
}

TEST(WorkTimes, AnUntimedCallLeavesThemUnset) {
  auto comm = single_rank();
  float x = 1.0f;
  auto work = comm->allreduce(&x, &x, 1, DataType::kF32, ReduceOp::kSum);
  work->wait();
  EXPECT_EQ(work->times().started, Clock::time_point{});
  EXPECT_EQ(work->times().finished, Clock::time_point{});
}

}  // namespace
}  // namespace plait
