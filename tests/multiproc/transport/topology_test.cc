// Provider selection per peer: ranks on one host use shm, ranks on other hosts tcp, and
// PLAIT_TRANSPORT overrides; shown by `plait info --job`, which sets a real fabric up.
// Hosts are simulated with PLAIT_HOST_ID (each rank sets its own from its RANK).
#include <gtest/gtest.h>

#include <string>

#include "support/job.h"

namespace plait::testing {
namespace {

constexpr int kTimeoutS = 120;

// `plait run -n <n> -- sh -c 'PLAIT_HOST_ID=h$((RANK % hosts)) exec plait info --job'`
JobResult info_job(int n, int hosts, const std::map<std::string, std::string>& env = {}) {
  const std::string script = "PLAIT_HOST_ID=h$((RANK % " + std::to_string(hosts) +
                             ")) exec \"$0\" info --job";
  return run_command({plait_bin(), "run", "-n", std::to_string(n), "--", "/bin/sh", "-c", script,
                      plait_bin()},
                     env, kTimeoutS);
}

TEST(Topology, OneHostUsesShmBetweenEveryPair) {
  JobResult r = run_command({plait_bin(), "run", "-n", "3", "--", plait_bin(), "info", "--job"},
                            {}, kTimeoutS);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("3 rank(s) on 1 host(s), 1 machine(s); fabric: shm"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("self shm shm"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("shm shm self"), std::string::npos) << r.output;
}

TEST(Topology, TwoSimulatedHostsMixShmAndTcp) {
  // Ranks 0 and 2 on host h0, ranks 1 and 3 on host h1.
  JobResult r = info_job(4, 2);
  ASSERT_EQ(r.status, 0) << r.output;
  // Two hosts, one machine: its cores are shared by all four ranks (oversubscription).
  EXPECT_NE(r.output.find("4 rank(s) on 2 host(s), 1 machine(s)"), std::string::npos) << r.output;
  // Rank 0's row: itself, tcp to 1, shm to 2, tcp to 3; rank 3's: tcp, shm, tcp, self.
  EXPECT_NE(r.output.find("self tcp shm tcp"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tcp shm tcp self"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("id:h1"), std::string::npos) << r.output;
}

TEST(Topology, TransportTcpOverridesTheHostRule) {
  JobResult r = info_job(2, 1, {{"PLAIT_TRANSPORT", "tcp"}});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("self tcp"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("shm"), std::string::npos) << r.output;
}

TEST(Topology, TransportShmAcrossHostsIsAClearError) {
  JobResult r = info_job(2, 2, {{"PLAIT_TRANSPORT", "shm"}});
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("PLAIT_TRANSPORT=shm, but rank"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is on another host"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace plait::testing
