// Who progresses the UCX worker while a user polls: a verbs-style loop of cq->poll() (no
// wait(), so nothing announces a poller) progresses it inline, and the provider's progress
// thread steps aside instead of sleeping on the worker's fd and waking for every message.
// Counted, not timed: the progress thread's context switches over a write ping-pong.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "core/clock.h"
#include "plait/plait.h"
#include "support/job.h"
#include "support/rank_checks.h"

namespace plait::testing {
namespace {

using namespace std::chrono_literals;
using rdma::Completion;

constexpr int kRoundTrips = 2000;

// Context switches (voluntary and not) of this process's threads named `name`.
long context_switches_of(const std::string& name) {
  long total = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string c;
    std::getline(comm, c);
    if (c != name) continue;
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);) {
      const auto colon = line.find(':');
      if (colon != std::string::npos && line.find("ctxt_switches") != std::string::npos)
        total += std::stol(line.substr(colon + 1));
    }
  }
  return total;
}

// A write ping-pong in which each side polls its memory and drains its queue with poll().
int poll_loop_child() {
  auto fabric = rdma::Fabric::create(bootstrap_from_env(30s));
  const int me = fabric->rank(), peer = 1 - me;
  auto cq = fabric->create_cq();
  auto in = fabric->allocate_memory(64, rdma::kAccessRemoteWrite);
  auto out = fabric->allocate_memory(64, rdma::kAccessLocal);
  const auto keys = fabric->exchange(in->remote_key());
  auto* word = static_cast<uint64_t*>(in->addr());
  auto* mine = static_cast<uint64_t*>(out->addr());
  int writes_in_flight = 0;
  // The lambdas return 0, or 1 after a FAIL line (CHECK_OR_FAIL's convention).
  auto reap = [&]() -> int {
    Completion c;
    while (cq->poll(&c)) {
      CHECK_OR_FAIL(c.ok(), "write: %s", c.error->what());
      --writes_in_flight;
    }
    return 0;
  };
  auto write = [&](uint64_t n) {
    *mine = n;
    fabric->write(peer, mine, sizeof *mine, keys[peer], 0, std::nullopt, *cq, n);
    ++writes_in_flight;
  };
  auto await = [&](uint64_t n) -> int {
    const Deadline deadline = Deadline::after(20s);
    while (std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire) != n) {
      if (reap() != 0) return 1;
      CHECK_OR_FAIL(!deadline.expired(), "write #%llu never arrived",
                    static_cast<unsigned long long>(n));
    }
    return 0;
  };
  // Warm-up: keys fetched, endpoints busy.
  for (uint64_t n = 1; n <= 100; ++n) {
    if (me == 0) write(n);
    if (await(n) != 0) return 1;
    if (me == 1) write(n);
  }
  const long before = context_switches_of("plait-ucx");
  for (uint64_t n = 101; n <= 100 + kRoundTrips; ++n) {
    if (me == 0) write(n);
    if (await(n) != 0) return 1;
    if (me == 1) write(n);
  }
  const long switches = context_switches_of("plait-ucx") - before;
  while (writes_in_flight > 0) {
    Completion c;
    CHECK_OR_FAIL(cq->wait(&c, 20s), "a write never completed");
    CHECK_OR_FAIL(c.ok(), "write: %s", c.error->what());
    --writes_in_flight;
  }
  fabric->exchange(rdma::RemoteKey{});
  std::printf("rank %d: progress thread switched %ld times in %d round trips\n", me, switches,
              kRoundTrips);
  // Asleep on the worker's fd, the thread woke for every message (>= 1 per round trip); stepped
  // aside, it looks at most every few hundred microseconds.
  CHECK_OR_FAIL(switches < kRoundTrips / 4,
                "the progress thread switched %ld times in %d round trips: it did not step "
                "aside for a caller polling with poll()",
                switches, kRoundTrips);
  std::printf("rank %d: poll loop ok\n", me);
  return 0;
}
ChildMode poll_loop("poll-loop", poll_loop_child);

TEST(UcxProgress, APollLoopProgressesTheWorkerWithoutWakingTheProgressThread) {
  JobResult r = run_job(2, "poll-loop",
                        {{"PLAIT_TRANSPORT", "ucx"}, {"PLAIT_UCX_TLS", "tcp"},
                         {"PLAIT_TIMEOUT", "30000"}},
                        120);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0: poll loop ok"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1: poll loop ok"), std::string::npos) << r.output;
  std::printf("%s", r.output.c_str());
}

}  // namespace
}  // namespace plait::testing
