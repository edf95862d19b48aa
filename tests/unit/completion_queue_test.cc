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
