// The TCP provider driven inline: a thread that polls a completion queue reads the sockets
// itself while the progress thread parks, and the progress thread takes the sockets back
// when the poller leaves, whether it says so (hand-off) or not (the parked thread's check).
// Ranks are threads of this process, each with its own Fabric over loopback sockets.
#include <gtest/gtest.h>

#include <thread>

#include "core/clock.h"
#include "plait/store.h"
#include "transport/fabric.h"
#include "transport/tcp/tcp_provider.h"
#include "unit/transport/fabric_test_support.h"

namespace plait::transport {
namespace {

using namespace std::chrono_literals;

std::vector<std::unique_ptr<Fabric>> make_pair_of_fabrics(WaitPolicy policy) {
  Config config;
  config.connect_timeout = 10s;
  config.timeout = 10s;
  config.wait_policy = policy;
  return test::make_fabrics_concurrently(2, [&](int r, std::shared_ptr<Store> store) {
    return create_tcp_fabric(
        test::fabric_options(r, 2, std::move(store), config, "job-secret", "inline"));
  });
}

// Polls `cq` until a completion comes (inside an active-polling bracket, as a driver does).
Completion poll_one(CompletionQueue& cq) {
  Completion c;
  const Deadline deadline = Deadline::after(10s);
  while (!cq.poll(&c) && !deadline.expired()) {
  }
  EXPECT_FALSE(deadline.expired()) << "no completion within 10 s of polling";
  return c;
}

// Both queues polled actively for the scope's life: the progress threads park meanwhile.
class Polling {
 public:
  explicit Polling(std::vector<std::unique_ptr<CompletionQueue>>& cqs) : cqs_(cqs) {
    for (auto& q : cqs_) q->begin_active_polling();
  }
  ~Polling() {
    for (auto& q : cqs_) q->end_active_polling();
  }

 private:
  std::vector<std::unique_ptr<CompletionQueue>>& cqs_;
};

class TcpInline : public ::testing::TestWithParam<WaitPolicy> {
 protected:
  void SetUp() override {
    f_ = make_pair_of_fabrics(GetParam());
    for (auto& f : f_) cqs_.push_back(f->create_cq());
  }
  void TearDown() override {
    f_.clear();
    cqs_.clear();
  }
  // Rank 0 sends `n` bytes to rank 1; rank 1's recv is posted first.
  void post_exchange(std::vector<char>& out, std::vector<char>& in, uint64_t tag) {
    f_[1]->recv(0, in.data(), in.size(), tag, cqs_[1].get(), tag);
    f_[0]->send(1, out.data(), out.size(), tag, 0, cqs_[0].get(), tag);
  }
  std::vector<std::unique_ptr<Fabric>> f_;
  std::vector<std::unique_ptr<CompletionQueue>> cqs_;
};

TEST_P(TcpInline, MessagesArriveWhilePolledAndAfterThePollerLeaves) {
  std::vector<char> out(100, 'x'), in(100);
  {
    // Many exchanges while both sides poll: the progress threads park meanwhile.
    Polling polling(cqs_);
    for (uint64_t i = 1; i <= 200; ++i) {
      post_exchange(out, in, i);
      EXPECT_TRUE(poll_one(*cqs_[0]).ok());
      Completion c = poll_one(*cqs_[1]);
      ASSERT_TRUE(c.ok()) << c.error->what();
      EXPECT_EQ(c.context, i);
    }
  }
  // Nobody polls any more and nobody says so: a parked progress thread must notice, and
  // deliver the next message to a queue that is only slept on.
  for (size_t n : {size_t{100}, size_t{3} << 20}) {
    std::vector<char> big_out(n, 'y'), big_in(n);
    post_exchange(big_out, big_in, 1000 + n);
    const auto start = Clock::now();
    ASSERT_TRUE(cqs_[1]->wait_ready(10s)) << "the parked progress thread never took over";
    EXPECT_LT(Clock::now() - start, 5s);
    Completion c;
    ASSERT_TRUE(cqs_[1]->poll(&c));
    ASSERT_TRUE(c.ok()) << c.error->what();
    EXPECT_EQ(big_in, big_out);
    ASSERT_TRUE(cqs_[0]->wait(&c, 10s));
    EXPECT_TRUE(c.ok());
  }
}

TEST_P(TcpInline, HandOffLetsASleepingWaiterGetItsCompletion) {
  std::vector<char> out(64, 'z'), in(64);
  {
    Polling polling(cqs_);
    for (uint64_t i = 1; i <= 50; ++i) {
      post_exchange(out, in, i);
      poll_one(*cqs_[0]);
      poll_one(*cqs_[1]);
    }
  }
  post_exchange(out, in, 99);
  cqs_[1]->hand_off_progress();
  Completion c;
  ASSERT_TRUE(cqs_[1]->wait(&c, 10s));
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(c.context, 99u);
}

TEST_P(TcpInline, APeerThatLeavesFailsAPolledRecvNamingIt) {
  std::vector<char> in(64);
  f_[1]->recv(0, in.data(), in.size(), 5, cqs_[1].get(), 5);
  std::thread leaver([&] {
    std::this_thread::sleep_for(20ms);
    f_[0].reset();
  });
  // Only rank 1's queue is polled: rank 0's must not be, past the end of its fabric (the
  // queue's inline progress has to outlive its last poll).
  Completion c;
  cqs_[1]->begin_active_polling();
  c = poll_one(*cqs_[1]);
  cqs_[1]->end_active_polling();
  leaver.join();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.error->what()).find("rank 0"), std::string::npos) << c.error->what();
}

TEST_P(TcpInline, APollerThatStopsMidTransferLeavesNothingStranded) {
  // A poller that stops in the middle of a large transfer without a word: the progress
  // thread must read the rest promptly (within its park check, not at its idle epoll
  // timeout a second later), including what the poller left past its read budget, whose
  // epoll edges are consumed already (that case needs more than a budget queued in one
  // socket, which this test provokes only now and then).
  for (int round = 0; round < 6; ++round) {
    const size_t n = size_t{24} << 20;
    std::vector<char> out(n, 'w'), in(n);
    post_exchange(out, in, 500 + round);
    Completion c;
    bool got = false;
    {
      Polling polling(cqs_);
      const Deadline stop = Deadline::after(std::chrono::microseconds(300 + 500 * round));
      while (!got && !stop.expired()) got = cqs_[1]->poll(&c);
    }
    const auto start = Clock::now();
    if (!got) {
      ASSERT_TRUE(cqs_[1]->wait_ready(10s)) << "round " << round;
      EXPECT_LT(Clock::now() - start, 500ms) << "round " << round;
      ASSERT_TRUE(cqs_[1]->poll(&c));
    }
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c.context, 500u + round);
    ASSERT_TRUE(cqs_[0]->wait(&c, 10s));
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, TcpInline,
                         ::testing::Values(WaitPolicy::kHybrid, WaitPolicy::kSpin,
                                           WaitPolicy::kBlock),
                         [](const auto& info) {
                           switch (info.param) {
                             case WaitPolicy::kSpin: return std::string("Spin");
                             case WaitPolicy::kBlock: return std::string("Block");
                             default: return std::string("Hybrid");
                           }
                         });

}  // namespace
}  // namespace plait::transport
