#include "transport/completion_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace plait::transport {
namespace {

using namespace std::chrono_literals;

Completion with_context(uint64_t context) {
  Completion c;
  c.context = context;
  return c;
}

class CompletionQueuePolicy : public ::testing::TestWithParam<WaitPolicy> {
 protected:
  PolicyCompletionQueue cq_{GetParam(), std::chrono::microseconds(50)};
};

TEST_P(CompletionQueuePolicy, PollIsEmptyThenFifo) {
  Completion c;
  EXPECT_FALSE(cq_.poll(&c));
  for (uint64_t i = 0; i < 5; ++i) cq_.push(with_context(i));
  EXPECT_EQ(cq_.size(), 5u);
  for (uint64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(cq_.poll(&c));
    EXPECT_EQ(c.context, i);
  }
  EXPECT_FALSE(cq_.poll(&c));
}

TEST_P(CompletionQueuePolicy, WaitGetsCompletionPushedByAnotherThread) {
  std::thread pusher([&] {
    std::this_thread::sleep_for(5ms);
    cq_.push(with_context(42));
  });
  Completion c;
  ASSERT_TRUE(cq_.wait(&c, 10s));
  EXPECT_EQ(c.context, 42u);
  pusher.join();
}

TEST_P(CompletionQueuePolicy, WaitTimesOutWithoutCompletion) {
  Completion c;
  EXPECT_FALSE(cq_.wait(&c, 2ms));
  EXPECT_FALSE(cq_.wait(&c, 0us));
}

TEST_P(CompletionQueuePolicy, InterruptWakesWaiter) {
  std::atomic<bool> returned{false};
  bool got = true;
  std::thread waiter([&] {
    Completion c;
    got = cq_.wait(&c, 30s);
    returned = true;
  });
  std::this_thread::sleep_for(5ms);
  cq_.interrupt();
  waiter.join();
  EXPECT_TRUE(returned);
  EXPECT_FALSE(got);
}

// Regression: a hybrid wait whose spin phase consumed an interrupt went on to block until
// its timeout, so the communicator engine slept through new work (200 ms per collective).
TEST(CompletionQueueHybrid, InterruptDuringSpinEndsTheWait) {
  PolicyCompletionQueue cq(WaitPolicy::kHybrid, std::chrono::seconds(10));
  auto start = std::chrono::steady_clock::now();
  std::thread interrupter([&] {
    std::this_thread::sleep_for(5ms);
    cq.interrupt();
  });
  Completion c;
  EXPECT_FALSE(cq.wait(&c, 60s));
  interrupter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 9s);  // ended by the interrupt, mid-spin
}

// Hybrid's spin budget grows when a completion came soon after the waiter gave up spinning,
// shrinks after long sleeps, and stays within [base, 16 x base].
TEST(CompletionQueueHybrid, SpinBudgetFollowsHowLongWaitsSlept) {
  using us = std::chrono::microseconds;
  const us base(50);
  EXPECT_EQ(next_spin_budget(base, us(10), true, base), us(100));   // caught soon after
  EXPECT_EQ(next_spin_budget(us(100), us(99), true, base), us(200));
  EXPECT_EQ(next_spin_budget(us(800), us(1), true, base), us(800));  // the cap
  EXPECT_EQ(next_spin_budget(us(100), us(10), false, base), us(100));  // no completion: no growth
  EXPECT_EQ(next_spin_budget(us(100), us(200), true, base), us(100));  // neither short nor long
  EXPECT_EQ(next_spin_budget(us(400), us(5000), true, base), us(200));  // a long sleep
  EXPECT_EQ(next_spin_budget(us(60), us(5000), false, base), us(50));   // not below the base
  us budget = base;
  for (int i = 0; i < 10; ++i) budget = next_spin_budget(budget, us(1), true, base);
  EXPECT_EQ(budget, us(800));
  for (int i = 0; i < 10; ++i) budget = next_spin_budget(budget, std::chrono::seconds(1), false, base);
  EXPECT_EQ(budget, base);
}

TEST_P(CompletionQueuePolicy, InterruptIsStickyAndConsumedOnce) {
  cq_.interrupt();
  Completion c;
  EXPECT_FALSE(cq_.wait(&c, 30s));  // returns at once: the interrupt was pending
  EXPECT_FALSE(cq_.wait(&c, 1ms));  // a normal timeout now
}

TEST_P(CompletionQueuePolicy, QueuedCompletionWinsOverInterrupt) {
  cq_.push(with_context(7));
  cq_.interrupt();
  Completion c;
  ASSERT_TRUE(cq_.wait(&c, 1s));
  EXPECT_EQ(c.context, 7u);
  EXPECT_FALSE(cq_.wait(&c, 30s));
}

TEST_P(CompletionQueuePolicy, ManyProducersOneConsumer) {
  constexpr int kProducers = 3, kEach = 2000;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      for (int i = 0; i < kEach; ++i) cq_.push(with_context(static_cast<uint64_t>(p)));
    });
  int counts[kProducers] = {};
  Completion c;
  for (int i = 0; i < kProducers * kEach; ++i) {
    ASSERT_TRUE(cq_.wait(&c, 10s));
    ++counts[c.context];
  }
  for (auto& t : producers) t.join();
  for (int count : counts) EXPECT_EQ(count, kEach);
  EXPECT_FALSE(cq_.poll(&c));
}

INSTANTIATE_TEST_SUITE_P(CompletionQueue, CompletionQueuePolicy,
                         ::testing::Values(WaitPolicy::kSpin, WaitPolicy::kBlock,
                                           WaitPolicy::kHybrid),
                         [](const auto& info) {
                           switch (info.param) {
                             case WaitPolicy::kSpin: return "Spin";
                             case WaitPolicy::kBlock: return "Block";
                             case WaitPolicy::kHybrid: return "Hybrid";
                           }
                           return "Unknown";
                         });

}  // namespace
}  // namespace plait::transport
