// Settings given in code (CommunicatorOptions::settings) on real ranks: they win over the
// environment, they reach the transport, communicators split or subgrouped from one inherit
// them, and another communicator of the same process is not affected.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "plait/plait.h"
#include "support/job.h"

namespace plait::testing {
namespace {

using namespace std::chrono_literals;

// Prints "<label>: <algorithm> sum=<value>" for one allreduce of the ranks' numbers.
void allreduce_and_print(Communicator& comm, const char* label) {
  int64_t x = comm.rank() + 1;
  WorkPtr work = comm.allreduce(&x, &x, 1, DataType::kI64, ReduceOp::kSum);
  work->wait();
  std::printf("%s: %s sum=%lld\n", label, work->algorithm().c_str(), static_cast<long long>(x));
}

int settings_child() {
  try {
    Bootstrap boot = bootstrap_from_env(30s);
    // The environment says ring and shared memory; the code says otherwise.
    auto coded = Communicator::create(
        boot, {.name = "coded",
               .settings = {{"PLAIT_ALGO_ALLREDUCE", "naive"}, {"PLAIT_TRANSPORT", "tcp"}}});
    auto plain = Communicator::create(boot, {.name = "plain"});
    allreduce_and_print(*coded, "coded");
    allreduce_and_print(*plain, "plain");
    auto split = coded->split(coded->rank() % 2, coded->rank());
    allreduce_and_print(*split, "split");
    if (coded->rank() < 2) {
      auto sub = coded->subgroup({0, 1});
      allreduce_and_print(*sub, "subgroup");
    }
    coded->barrier()->wait();
  } catch (const Error& e) {
    std::printf("ERROR %s\n", e.what());
    return 3;
  }
  return 0;
}
ChildMode settings_mode("settings", settings_child);

TEST(CommunicatorSettings, CodeWinsOverTheEnvironmentAndSplitsInheritIt) {
  auto results = spawn_ranks(3, {0, 1, 2}, "settings", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "60000"},
                                              {"PLAIT_ALGO_ALLREDUCE", "ring"},
                                              {"PLAIT_TRANSPORT", "shm"},
                                              {"PLAIT_LOG", "info"}};
  });
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 0) << "rank " << r.rank << ": " << r.output;
    // The fabrics say which provider reaches the peers (PLAIT_LOG=info): tcp for the
    // communicator whose code asked for it, shm for the other.
    const std::string me = "rank " + std::to_string(r.rank) + ": 1 host(s); ";
    EXPECT_NE(r.output.find(me + "tcp to ranks "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(me + "shm to ranks "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("coded: naive sum=6\n"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("plain: ring sum=6\n"), std::string::npos) << r.output;
    // Split by parity: ranks 0 and 2 become ranks 0 and 1 (1 + 2), rank 1 is alone.
    const char* split = r.rank == 1 ? "split: naive sum=1\n" : "split: naive sum=3\n";
    EXPECT_NE(r.output.find(split), std::string::npos) << r.output;
    if (r.rank < 2) {
      EXPECT_NE(r.output.find("subgroup: naive sum=3\n"), std::string::npos) << r.output;
    }
  }
}

}  // namespace
}  // namespace plait::testing
