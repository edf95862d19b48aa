// The communicator engine's promises about user memory and waiting, on real ranks:
//  - no byte lands in a user buffer once its Work has failed (the fabric is cancelled first);
//  - a thread's wait(timeout) is not held up by another thread spinning in the engine;
//  - abort() returns only once everything is cancelled, and says so when it cannot;
//  - calls whose byte size overflows, and communicator ids past the last, are errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <regex>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "plait/plait.h"
#include "support/job.h"

namespace plait::testing {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<Communicator> join() { return Communicator::create(bootstrap_from_env(30s)); }

int report(const Error& e) {
  std::printf("ERROR %s: %s\n", std::string(to_string(e.category())).c_str(), e.what());
  return 3;
}

// --- no write after failure ---

// Rank 1 sends a large buffer to rank 0, by broadcast or by send. Once data is landing,
// rank 0 stops rank 1 (SIGSTOP) and lets its own deadline pass. When rank 0's Work fails, its
// callback (run inside the engine's finish, by the thread that fails the Work) overwrites the
// buffer with a sentinel, resumes rank 1 (SIGCONT) and lingers: a transport that was not
// cancelled before the failure takes the rest of rank 1's data into the buffer meanwhile. The sender must push the data for
// this to work (tcp, or shm without cross-memory attach, where the receiver pulls).
constexpr size_t kFloats = size_t{64} << 20;  // 256 MiB
constexpr uint8_t kSentinel = 0x7f;

WorkPtr start_transfer(Communicator& comm, const std::string& kind, float* buf,
                       std::chrono::milliseconds timeout) {
  if (kind == "collective")
    return comm.broadcast(buf, buf, kFloats, DataType::kF32, 1, {.timeout = timeout});
  if (comm.rank() == 1) return comm.send(buf, kFloats, DataType::kF32, 0, 9, {.timeout = timeout});
  return comm.recv(buf, kFloats, DataType::kF32, 1, 9, {.timeout = timeout});
}

size_t count_landed(const std::vector<float>& buf, size_t stride) {
  size_t landed = 0;
  for (size_t i = 0; i < buf.size(); i += stride)
    landed += std::atomic_ref<const float>(buf[i]).load(std::memory_order_relaxed) != 0.0f;
  return landed;
}

int late_bytes_child() {
  const std::string kind = std::getenv("TEST_KIND");
  auto comm = join();
  std::vector<float> buf(kFloats, comm->rank() == 1 ? 1.0f : 0.0f);
  Bootstrap boot = bootstrap_from_env(30s);
  if (comm->rank() == 1) {
    boot.store->set("sender_pid", std::to_string(::getpid()));
    try {
      start_transfer(*comm, kind, buf.data(), 60s)->wait();
    } catch (const Error&) {
      // Rank 0's abort reaches us: expected.
    }
    return 0;
  }
  const pid_t sender = std::stoi(boot.store->get_string("sender_pid", 30s));
  std::atomic<size_t> landed_at_failure{0};
  std::atomic<bool> callback_done{false};
  WorkPtr work = start_transfer(*comm, kind, buf.data(), 2s);
  work->on_complete([&] {
    landed_at_failure = count_landed(buf, 1);
    std::memset(buf.data(), kSentinel, buf.size() * sizeof(float));
    ::kill(sender, SIGCONT);
    std::this_thread::sleep_for(300ms);
    callback_done = true;
  });
  const auto give_up = Clock::now() + 30s;
  while (count_landed(buf, 1 << 16) == 0 && Clock::now() < give_up) std::this_thread::yield();
  ::kill(sender, SIGSTOP);
  try {
    work->wait();
    std::printf("FAIL: the transfer finished before the sender was stopped\n");
    ::kill(sender, SIGCONT);
    return 2;
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::kTimeout) return report(e);
  }
  // Callbacks run right after waiters are released; this one is ours to wait for.
  while (!callback_done) std::this_thread::sleep_for(1ms);
  size_t written_after = 0;
  const auto* bytes = reinterpret_cast<const uint8_t*>(buf.data());
  for (size_t i = 0; i < buf.size() * sizeof(float); ++i) written_after += bytes[i] != kSentinel;
  std::printf("%zu of %zu elements had landed when the Work failed; %zu bytes written after\n",
              landed_at_failure.load(), buf.size(), written_after);
  return written_after == 0 ? 0 : 1;
}
ChildMode late_bytes("late_bytes", late_bytes_child);

// (transport, kind of operation)
class NoWriteAfterFailure
    : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(NoWriteAfterFailure, NoByteLandsInABufferAfterItsWorkFailed) {
  const auto [transport, kind] = GetParam();
  auto results = spawn_ranks(2, {0, 1}, "late_bytes", [&](int) {
    return std::map<std::string, std::string>{{"PLAIT_TRANSPORT", transport},
                                              {"PLAIT_SHM_CMA", "off"},
                                              {"PLAIT_TIMEOUT", "30000"},
                                              {"TEST_KIND", kind}};
  });
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status, 0) << results[0].output;
  EXPECT_NE(results[0].output.find("; 0 bytes written after"), std::string::npos)
      << results[0].output;
}

INSTANTIATE_TEST_SUITE_P(Transports, NoWriteAfterFailure,
                         ::testing::Combine(::testing::Values("tcp", "shm"),
                                            ::testing::Values("collective", "p2p")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param);
                         });

// --- waits stay bounded ---

// Under PLAIT_WAIT=spin a waiting thread drives the engine for its whole wait. A second
// thread's shorter wait must end on time, not when the first one lets go: the first one
// waits for as long as the test lets it (it ends only when the communicator is aborted,
// after the short wait has returned; without the fix, the job hangs until it is killed).
int two_waiters_child() {
  auto comm = join();
  if (comm->rank() == 1) {
    try {
      comm->barrier()->wait();
    } catch (const Error& e) {
      report(e);  // rank 0's abort, whose text the test reads
    }
    return 0;
  }
  int32_t a = 0, b = 0;
  WorkPtr long_wait = comm->recv(&a, 1, DataType::kI32, 1, 1);  // never sent
  WorkPtr short_wait = comm->recv(&b, 1, DataType::kI32, 1, 2);  // never sent
  std::atomic<bool> long_returned{false}, long_started{false};
  std::thread spinner([&] {
    long_started = true;
    try {
      long_wait->wait(std::chrono::hours(1));
    } catch (const Error&) {
    }
    long_returned = true;
  });
  while (!long_started) std::this_thread::yield();
  std::this_thread::sleep_for(200ms);  // the spinner holds the engine by now
  bool timed_out = false;
  try {
    short_wait->wait(300ms);
  } catch (const Error& e) {
    timed_out = e.category() == ErrorCategory::kTimeout;
  }
  const bool before_the_other = !long_returned.load();
  comm->abort("test over");  // releases the spinner
  spinner.join();
  std::printf("short wait: %s, %s the long one returned\n", timed_out ? "timed out" : "no timeout",
              before_the_other ? "before" : "after");
  return timed_out && before_the_other ? 0 : 1;
}
ChildMode two_waiters("two_waiters", two_waiters_child);

TEST(EngineWaits, AShortWaitEndsWhileAnotherThreadSpinsInTheEngine) {
  auto results = spawn_ranks(
      2, {0, 1}, "two_waiters",
      [](int) {
        return std::map<std::string, std::string>{{"PLAIT_WAIT", "spin"},
                                                  {"PLAIT_TIMEOUT", "3600000"}};
      },
      /*timeout_s=*/60);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status, 0) << results[0].output;
  EXPECT_NE(results[0].output.find("short wait: timed out, before the long one returned"),
            std::string::npos)
      << results[0].output;
  EXPECT_NE(results[1].output.find(
                "ERROR aborted: rank 1: communicator aborted: rank 0 aborted: rank 0 called abort: "
                "test over"),
            std::string::npos)
      << results[1].output;
}

// A Work callback that never returns holds the engine: abort() cannot cancel anything and
// must say so within the communicator's timeout instead of returning as if it had. Under
// PLAIT_WAIT=block no waiter drives the engine, but a submitting thread does, for one pass:
// rank 1's answer may arrive within the pass that sends "go", and the callback then runs in
// the submitter. So a helper thread submits, and the main thread stays free either way.
int stuck_abort_child() {
  auto comm = join();
  int32_t v = 7;
  int32_t go = 1;
  if (comm->rank() == 1) {
    try {
      comm->recv(&go, 1, DataType::kI32, 0, 4)->wait();
      comm->send(&v, 1, DataType::kI32, 0, 5)->wait();
      comm->barrier()->wait();
    } catch (const Error& e) {
      report(e);  // rank 0's abort, whose text the test reads
    }
    return 0;
  }
  std::atomic<bool> release{false}, entered{false};
  WorkPtr recv = comm->recv(&v, 1, DataType::kI32, 1, 5);
  recv->on_complete([&] {
    entered = true;
    const auto until = Clock::now() + 60s;
    while (!release && Clock::now() < until) std::this_thread::sleep_for(10ms);
  });
  WorkPtr go_sent;
  std::thread submitter([&] { go_sent = comm->send(&go, 1, DataType::kI32, 1, 4); });
  while (!entered) std::this_thread::sleep_for(1ms);
  int rc = 1;
  try {
    comm->abort("test");
    std::printf("abort returned although the engine was held\n");
  } catch (const Error& e) {
    std::printf("abort: %s\n", e.what());
    rc = e.category() == ErrorCategory::kTimeout ? 0 : 1;
  }
  release = true;
  submitter.join();
  try {
    comm->barrier()->wait(5s);
  } catch (const Error&) {
    // Aborted by now.
  }
  return rc;
}
ChildMode stuck_abort("stuck_abort", stuck_abort_child);

TEST(EngineWaits, AbortThatCannotCancelSaysSo) {
  auto results = spawn_ranks(2, {0, 1}, "stuck_abort", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "2000"}, {"PLAIT_WAIT", "block"}};
  });
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status, 0) << results[0].output;
  EXPECT_NE(results[0].output.find(
                "abort: rank 0: abort: Timed out after 2000 ms waiting for the abort to cancel"),
            std::string::npos)
      << results[0].output;
  // Rank 1 either runs out of time in its barrier or hears of rank 0's abort first: either
  // way its error names rank 0.
  EXPECT_TRUE(std::regex_search(
      results[1].output,
      std::regex("ERROR (timeout|aborted): rank 1: [^\\n]*(barrier #0 with peer 0: Timed out "
                 "after 2000 ms waiting for (recv from rank 0 |rank 0 to arrive at )|rank 0 "
                 "aborted: rank 0 called abort: test )")))
      << results[1].output;
}

// --- overflow ---

int overflow_child() {
  auto comm = join();
  float x = 0;
  const size_t huge = SIZE_MAX / 2;  // times 4 bytes wraps around
  int refused = 0;
  auto expect_refused = [&](const char* what, auto&& call) {
    try {
      call();
      std::printf("FAIL: %s was accepted\n", what);
    } catch (const Error& e) {
      const bool ok = e.category() == ErrorCategory::kInvalidUsage &&
                      std::string(e.what()).find("overflow") != std::string::npos;
      std::printf("%s: %s\n", what, e.what());
      refused += ok;
    }
  };
  expect_refused("allreduce", [&] { comm->allreduce(&x, &x, huge, DataType::kF32, ReduceOp::kSum); });
  expect_refused("send", [&] { comm->send(&x, huge, DataType::kF32, 0, 0); });
  expect_refused("recv", [&] { comm->recv(&x, huge, DataType::kF32, 0, 0); });
  // count x size() wraps, though count alone fits.
  expect_refused("allgather", [&] {
    comm->allgather(&x, &x, SIZE_MAX / 2 + 1, DataType::kU8, {});
  });
  expect_refused("gather", [&] { comm->gather(&x, &x, SIZE_MAX / 2 + 1, DataType::kU8, 0, {}); });
  expect_refused("allgatherv", [&] {
    comm->allgatherv(&x, &x, std::vector<size_t>(comm->size(), SIZE_MAX / 2 + 1), DataType::kU8, {});
  });
  comm->barrier()->wait();  // the communicator is still usable
  std::printf("refused %d of 6\n", refused);
  return refused == 6 ? 0 : 1;
}
ChildMode overflow("overflow", overflow_child);

TEST(EngineArguments, ByteSizesThatOverflowAreRefused) {
  auto results = spawn_ranks(2, {0, 1}, "overflow", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "30000"}};
  });
  for (const auto& r : results) EXPECT_EQ(r.status, 0) << "rank " << r.rank << ": " << r.output;
}

// Ids come from a counter in the store that is never reset; the test starts it near the end.
int ids_child() {
  Bootstrap boot = bootstrap_from_env(30s);
  if (boot.rank == 0) boot.store->add("world/0/comm_ids", (int64_t{1} << 20) - 3);
  auto comm = Communicator::create(boot);
  auto last = comm->split(0, comm->rank());  // the last id there is
  last->barrier()->wait();
  try {
    comm->split(0, comm->rank());
    std::printf("FAIL: a split past the last id succeeded\n");
    return 1;
  } catch (const Error& e) {
    std::printf("split: %s\n", e.what());
  }
  try {
    comm->subgroup({0, 1});
    std::printf("FAIL: a subgroup past the last id succeeded\n");
    return 1;
  } catch (const Error& e) {
    std::printf("subgroup: %s\n", e.what());
  }
  comm->barrier()->wait();
  return 0;
}
ChildMode ids("ids", ids_child);

TEST(EngineArguments, CommunicatorIdsRunOutWithAnErrorNotAWrapAround) {
  auto results = spawn_ranks(2, {0, 1}, "ids", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "30000"}};
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 0) << "rank " << r.rank << ": " << r.output;
    EXPECT_NE(r.output.find("split: rank " + std::to_string(r.rank) +
                            ": split: no communicator id left"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("subgroup: rank " + std::to_string(r.rank) +
                            ": subgroup: no communicator id left"),
              std::string::npos)
        << r.output;
  }
}

}  // namespace
}  // namespace plait::testing
