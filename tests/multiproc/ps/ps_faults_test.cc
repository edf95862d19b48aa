// The parameter server's bad input and faults on real ranks: refusals before anything is
// sent, dead servers and dead workers named on every affected rank (shm and tcp).
#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "support/job.h"
#include "support/ps_ranks.h"

namespace plait::testing {
namespace {

// Bad input is refused at the call, before anything is sent: a round after the refusals
// sums only the valid pushes.
int bad_input_child() {
  auto kv = make_store(Consistency::kBsp);
  kv->register_key(1, 100, DataType::kF32);
  CHECK_OR_FAIL(refused([&] { kv->register_key(1, 100, DataType::kF32); }, "already registered"),
                "duplicate registration");
  CHECK_OR_FAIL(refused([&] { kv->register_key(2, 10, DataType::kI32, {.update = {.rule = Rule::kAdam}}); },
                        "needs a floating-point key"),
                "optimizer on an integer key");
  CHECK_OR_FAIL(refused([&] { kv->register_key(3, 0, DataType::kF32); }, "no elements"), "empty key");
  std::vector<float> g(100, 1.0f), out(100), small(50);
  if (kv->is_server()) {
    CHECK_OR_FAIL(refused([&] { kv->push(1, g.data(), 100, DataType::kF32); }, "only workers push"),
                  "push on a server");
    kv->finalize();
    std::printf("server: ps bad input ok\n");
    return 0;
  }
  const int me = kv->worker_index(), W = kv->num_workers();
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(me + 1);
  CHECK_OR_FAIL(refused([&] { kv->push(99, g.data(), 100, DataType::kF32); }, "never registered"), "unknown key");
  CHECK_OR_FAIL(refused([&] { kv->push(1, g.data(), 100, DataType::kF64); }, "holds f32, not f64"), "wrong dtype");
  CHECK_OR_FAIL(refused([&] { kv->push(1, g.data(), 101, DataType::kF32); }, "holds 100 elements"), "wrong count");
  CHECK_OR_FAIL(refused([&] { kv->pull(1, small.data(), 50, DataType::kF32); }, "buffer of 50"), "pull buffer too small");
  CHECK_OR_FAIL(refused([&] { kv->push(1, nullptr, 100, DataType::kF32); }, "null"), "null data");
  CHECK_OR_FAIL(refused([&] { kv->push({1, 1}, {g.data(), g.data()}); }, "appears twice"), "duplicate in a batch");
  CHECK_OR_FAIL(refused([&] { kv->push({1, 99}, {g.data(), g.data()}); }, "never registered"), "unknown key in a batch");
  auto wk = kv->push_pull(1, g.data(), out.data(), 100, DataType::kF32);
  wk->wait();
  const float want = static_cast<float>(W * (W + 1) / 2);
  for (float x : out) CHECK_OR_FAIL(x == want, "after refused pushes: %g, want %g", x, want);
  CHECK_OR_FAIL(wk->version() == 1, "version %llu", static_cast<unsigned long long>(wk->version()));
  kv->finalize();
  std::printf("worker %d: ps bad input ok\n", me);
  return 0;
}

ChildMode bad_input_mode("ps_bad_input", bad_input_child);

// Faults: PS_DIE names the rank that kills itself after the first round (a server, or a
// worker); the others keep going round after round until the death reaches them.
int fault_child() {
  const int die = env_int("PS_DIE", -1);
  auto bootstrap = bootstrap_from_env(30s);
  ps::Options o;
  o.servers = env_int("PS_SERVERS", 1);
  auto kv = KVStore::create(bootstrap, o);
  const size_t n = 300000;  // several partitions
  kv->register_key(1, n, DataType::kF32);
  std::vector<float> g(n, 1.0f), out(n);
  try {
    if (kv->is_server()) {
      if (kv->rank() == die) {
        std::this_thread::sleep_for(300ms);
        std::raise(SIGKILL);
      }
      kv->finalize();
      return 0;
    }
    kv->push_pull(1, g.data(), out.data(), n, DataType::kF32)->wait();
    if (kv->rank() == die) std::raise(SIGKILL);
    // A worker whose next requests reach the server only after the death was noticed (the
    // server's receives from any source fail with a dead peer and must be posted again).
    if (kv->rank() == env_int("PS_LATE", -1)) std::this_thread::sleep_for(500ms);
    for (int round = 2; round < 1000; ++round) {
      kv->push_pull(1, g.data(), out.data(), n, DataType::kF32)->wait();
      std::this_thread::sleep_for(10ms);
    }
    std::printf("no failure reached this rank\n");
    return 1;
  } catch (const Error& e) {
    return report(e);
  }
}

ChildMode fault_mode("ps_fault", fault_child);

TEST(PsBadInput, RefusedAtTheCallWithoutChangingServerState) {
  JobResult r = run_job(3, "ps_bad_input", {{"PLAIT_TIMEOUT", "60000"}}, 300);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "ps bad input ok"), 3u) << r.output;
}


class PsFaults : public ::testing::TestWithParam<std::string> {};

TEST_P(PsFaults, ADeadServerFailsEveryWorkerNamingItAndTheKey) {
  // Ranks 0 and 1 work, rank 2 serves and dies.
  auto results = spawn_ranks(3, {0, 1, 2}, "ps_fault", [](int) {
    return std::map<std::string, std::string>{
        {"PLAIT_TIMEOUT", "60000"}, {"PS_DIE", "2"}, {"PLAIT_TRANSPORT", GetParam()}};
  });
  for (const auto& r : results) {
    if (r.rank == 2) {
      EXPECT_EQ(r.status, 128 + SIGKILL) << r.output;
      continue;
    }
    EXPECT_EQ(r.status, 3) << r.output;
    const std::string error = error_line(r.output);
    EXPECT_NE(error.find("ERROR remote"), std::string::npos) << r.output;
    EXPECT_NE(error.find("parameter server rank 2 failed"), std::string::npos) << r.output;
    EXPECT_NE(error.find("key 1"), std::string::npos) << r.output;
  }
}

TEST_P(PsFaults, ADeadWorkerFailsTheOthersPullsNamingIt) {
  // Ranks 0-2 work (rank 2 dies after round 1; rank 0 comes late to round 2), rank 3 serves.
  auto results = spawn_ranks(4, {0, 1, 2, 3}, "ps_fault", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "60000"},
                                              {"PS_DIE", "2"},
                                              {"PS_LATE", "0"},
                                              {"PLAIT_TRANSPORT", GetParam()}};
  });
  for (const auto& r : results) {
    if (r.rank == 2) {
      EXPECT_EQ(r.status, 128 + SIGKILL) << r.output;
      continue;
    }
    EXPECT_EQ(r.status, 3) << "rank " << r.rank << ": " << r.output;
    const std::string error = error_line(r.output);
    EXPECT_NE(error.find("worker rank 2 is gone"), std::string::npos) << "rank " << r.rank << ": " << r.output;
    EXPECT_EQ(error.find("timed out"), std::string::npos) << r.output;
    if (r.rank != 3) {
      EXPECT_NE(error.find("key 1"), std::string::npos) << r.output;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, PsFaults, ::testing::Values("shm", "tcp"));


}  // namespace
}  // namespace plait::testing
