// The wait policies under oversubscription: 4 ranks on this machine's 2 cores (more on a
// bigger one is still correct, only less oversubscribed) run many small collectives and a
// few large ones under spin, block and hybrid. Every result must be right and every job must
// finish; the times are printed for people, not asserted (shared machines are noisy).
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "core/clock.h"
#include "plait/plait.h"
#include "support/job.h"

namespace plait::testing {
namespace {

int busy_child() {
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(60)));
  const int n = comm->size(), me = comm->rank();
  const auto start = Clock::now();
  // Small ones: latency-bound, where spinning ranks fight over the cores.
  for (int i = 0; i < 300; ++i) {
    int64_t v = me + i;
    comm->allreduce(&v, &v, 1, DataType::kI64, ReduceOp::kSum)->wait();
    const int64_t want = static_cast<int64_t>(n) * (n - 1) / 2 + static_cast<int64_t>(n) * i;
    if (v != want) {
      std::printf("FAIL: allreduce %d gave %lld, want %lld\n", i, static_cast<long long>(v),
                  static_cast<long long>(want));
      return 1;
    }
  }
  // Large ones: rendezvous and pipelining while ranks are descheduled.
  std::vector<float> big(1 << 20);
  for (int i = 0; i < 3; ++i) {
    for (size_t k = 0; k < big.size(); ++k) big[k] = static_cast<float>(me + (k % 7));
    comm->allreduce(big.data(), big.data(), big.size(), DataType::kF32, ReduceOp::kSum)->wait();
    for (size_t k = 0; k < big.size(); k += 4099) {
      const float want = static_cast<float>(n * (n - 1) / 2 + n * static_cast<int>(k % 7));
      if (big[k] != want) {
        std::printf("FAIL: large allreduce element %zu is %g, want %g\n", k, big[k], want);
        return 1;
      }
    }
  }
  comm->barrier()->wait();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  if (me == 0) std::printf("policy run done in %.3f s\n", s);
  return 0;
}
ChildMode busy("busy", busy_child);

class WaitPolicy : public ::testing::TestWithParam<const char*> {};

TEST_P(WaitPolicy, OversubscribedRanksStayCorrectAndFinish) {
  JobResult r = run_job(4, "busy", {{"PLAIT_WAIT", GetParam()}, {"PLAIT_TIMEOUT", "60000"}}, 180);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("policy run done"), std::string::npos) << r.output;
  std::printf("PLAIT_WAIT=%s, 4 ranks: %.2f s wall\n", GetParam(), r.seconds);
}

INSTANTIATE_TEST_SUITE_P(Policies, WaitPolicy, ::testing::Values("spin", "block", "hybrid"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace plait::testing
