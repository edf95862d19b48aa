// The per-call primitives a Work's life goes through: its wait on a futex in its own state
// word (no driver here, so every wait sleeps), the futex mutex of the communicator and its
// engine, and the reduction kernel a collective resolves once per shape.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "core/futex_mutex.h"
#include "core/futex_shared_mutex.h"
#include "core/reduce.h"
#include "core/work_impl.h"
#include "plait/error.h"

namespace plait {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<WorkImpl> make_work() {
  return std::make_shared<WorkImpl>(WorkLabel{.op = "allreduce", .seq = 7, .bytes = 8},
                                          std::chrono::milliseconds(60000), 3);
}

TEST(WorkWait, SleepersAreWokenByTheFinishAndSeeItsOutcome) {
  auto work = make_work();
  std::atomic<int> woken{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i)
    waiters.emplace_back([&] {
      work->wait(30s);
      woken.fetch_add(1);
    });
  std::this_thread::sleep_for(20ms);  // most of them asleep by now; either way they must wake
  EXPECT_EQ(woken.load(), 0);
  work->finish(nullptr, 2, 8);
  for (auto& t : waiters) t.join();
  EXPECT_EQ(woken.load(), 4);
  EXPECT_EQ(work->source(), 2);
  EXPECT_EQ(work->bytes(), 8u);
}

TEST(WorkWait, AFailureReachesTheSleeper) {
  auto work = make_work();
  std::thread finisher([&] {
    std::this_thread::sleep_for(10ms);
    work->finish(std::make_shared<const Error>(remote_error("peer gone", {.rank = 3, .peer = 1})));
  });
  try {
    work->wait(30s);
    ADD_FAILURE() << "expected the Work's error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kRemote);
    EXPECT_NE(std::string(e.what()).find("peer gone"), std::string::npos) << e.what();
  }
  finisher.join();
}

TEST(WorkWait, AWaitThatRunsOutSaysWhatItWaitedFor) {
  auto work = make_work();
  try {
    work->wait(20ms);
    ADD_FAILURE() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("allreduce #7"), std::string::npos) << e.what();
  }
  // A later finish still completes it, and a waiter that comes then returns at once.
  work->finish(nullptr);
  work->wait(1ms);
  EXPECT_TRUE(work->test());
}

TEST(WorkWait, CallbacksRunOnceWhetherRegisteredBeforeOrAfterTheFinish) {
  auto work = make_work();
  int before = 0, after = 0;
  work->on_complete([&] { ++before; });
  work->finish(nullptr);
  work->finish(nullptr);  // the first call wins
  work->on_complete([&] { ++after; });
  EXPECT_EQ(before, 1);
  EXPECT_EQ(after, 1);
}

TEST(FutexMutex, ExcludesUnderContentionAndTryLockFailsWhileHeld) {
  FutexMutex mu;
  long counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) {
        std::lock_guard lock(mu);
        ++counter;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, 400000);

  std::unique_lock held(mu);
  std::thread other([&] {
    std::unique_lock attempt(mu, std::try_to_lock);
    EXPECT_FALSE(attempt.owns_lock());
  });
  other.join();
  held.unlock();
  std::unique_lock attempt(mu, std::try_to_lock);
  EXPECT_TRUE(attempt.owns_lock());
}

TEST(FutexSharedMutex, ReadersShareWritersExcludeAndWaitForReaders) {
  FutexSharedMutex mu;
  // Readers together: a second reader gets in while one holds it, a writer does not.
  {
    std::shared_lock r1(mu);
    std::thread other([&] {
      std::shared_lock r2(mu, std::try_to_lock);
      EXPECT_TRUE(r2.owns_lock());
      std::unique_lock w(mu, std::try_to_lock);
      EXPECT_FALSE(w.owns_lock());
    });
    other.join();
  }
  // A writer waits for the reader inside, and readers wait for the writer.
  std::atomic<int> stage{0};
  std::shared_lock reader(mu);
  std::thread writer([&] {
    std::unique_lock w(mu);
    EXPECT_EQ(stage.load(), 1) << "the writer got in while a reader held the lock";
    stage = 2;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stage = 1;
  reader.unlock();
  writer.join();
  EXPECT_EQ(stage.load(), 2);

  // Under contention: readers see a consistent pair, writers never lose an update.
  long a = 0, b = 0;
  std::atomic<bool> torn{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        std::unique_lock w(mu);
        ++a;
        ++b;
      }
    });
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 50000; ++i) {
        std::shared_lock r(mu);
        if (a != b) torn = true;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_FALSE(torn.load());
  EXPECT_EQ(a, 40000);
}

TEST(CombineKernel, MatchesReduceIntoForEveryTypeOpAndSizeClass) {
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                        ReduceOp::kAvg}) {
      for (size_t count : {size_t{1}, size_t{3}, size_t{8}, size_t{9}, size_t{100}}) {
        const size_t bytes = count * dtype_size(dtype);
        std::vector<uint8_t> a(bytes), b(bytes), want(bytes), got(bytes);
        for (size_t i = 0; i < bytes; ++i) {
          // Small values: valid in every format (f16, bf16 included), no overflow to argue about.
          a[i] = static_cast<uint8_t>(i % 3 == 0 ? 0 : 1 + i % 5);
          b[i] = static_cast<uint8_t>(i % 7 == 0 ? 0 : 2 + i % 3);
        }
        reduce_into(dtype, op, want.data(), a.data(), b.data(), count);
        for (bool few : {false, true}) {
          if (few && count > kFewElements) continue;
          combine_kernel(dtype, op, few)(got.data(), a.data(), b.data(), count);
          EXPECT_EQ(want, got) << to_string(dtype) << " op " << static_cast<int>(op) << " x"
                               << count << (few ? " few" : "");
        }
      }
    }
  }
}

}  // namespace
}  // namespace plait
