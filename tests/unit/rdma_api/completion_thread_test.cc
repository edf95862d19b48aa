// rdma::CompletionThread (plait/rdma.h) on two ranks in one process: a handler may destroy the
// thread that runs it (a service that shuts down on its last completion). Destroying it from
// its own handler once ended the process in std::terminate: the thread was neither joined
// nor detached.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "plait/plait.h"

namespace plait::rdma {
namespace {

using namespace std::chrono_literals;

// Two ranks as threads of this process over one in-process store; rank 0 writes into a
// window of rank 1 (a fabric does not write to its own rank).
struct TwoRanks {
  std::unique_ptr<Fabric> fabric[2];
  std::vector<char> window = std::vector<char>(64);
  std::unique_ptr<MemoryRegion> region;
  RemoteKey key;

  TwoRanks() {
    auto store = make_hash_store();
    std::vector<RemoteKey> keys;
    std::thread other([&] {
      Bootstrap b{.rank = 1, .size = 2, .store = store};
      fabric[1] = Fabric::create(b, {.name = "completion-thread"});
      region = fabric[1]->register_memory(window.data(), window.size(), kAccessRemoteWrite);
      fabric[1]->exchange(region->remote_key());
    });
    Bootstrap b{.rank = 0, .size = 2, .store = store};
    fabric[0] = Fabric::create(b, {.name = "completion-thread"});
    key = fabric[0]->exchange(RemoteKey{})[1];
    other.join();
  }
};

TEST(CompletionThread, AHandlerMayDestroyItsOwnThread) {
  TwoRanks ranks;
  auto cq = ranks.fabric[0]->create_cq();
  std::vector<char> src(64, 'x');

  std::atomic<int> handled{0};
  auto thread = std::make_shared<std::unique_ptr<CompletionThread>>();
  *thread = std::make_unique<CompletionThread>(*cq, [thread, &handled](const Completion&) {
    thread->reset();  // from the handler, on the thread being destroyed
    handled.fetch_add(1);
  });
  ranks.fabric[0]->write(1, src.data(), src.size(), ranks.key, 0, {}, *cq, 1);
  for (int i = 0; i < 1000 && handled.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(handled.load(), 1);
  // The thread ends by itself; a second completion reaches no handler.
  ranks.fabric[0]->write(1, src.data(), src.size(), ranks.key, 0, {}, *cq, 2);
  Completion c;
  ASSERT_TRUE(cq->wait(&c, 10s));
  EXPECT_EQ(c.context, 2u);
  EXPECT_EQ(handled.load(), 1);
  EXPECT_EQ(ranks.window[63], 'x');
}

TEST(CompletionThread, StopFromOutsideJoinsAndIsIdempotent) {
  TwoRanks ranks;
  auto cq = ranks.fabric[0]->create_cq();
  std::atomic<int> handled{0};
  CompletionThread thread(*cq, [&](const Completion&) { handled.fetch_add(1); });
  thread.stop();
  thread.stop();
  std::vector<char> src(8, 'y');
  ranks.fabric[0]->write(1, src.data(), src.size(), ranks.key, 0, {}, *cq, 3);
  Completion c;
  ASSERT_TRUE(cq->wait(&c, 10s));  // stopped: the completion stays in the queue for us
  EXPECT_EQ(c.context, 3u);
  EXPECT_EQ(handled.load(), 0);
}

}  // namespace
}  // namespace plait::rdma
