// Two "hosts" in network namespaces joined by a veth pair: ranks find each other through
// the torchrun environment (rank 0 hosts the store on MASTER_PORT + 1) and advertise the
// address that routes to the store, not loopback. Needs root and iproute2; skipped otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "support/job.h"

namespace plait::testing {
namespace {

class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    const std::string id = std::to_string(::getpid());
    ns_[0] = "plait-t" + id + "-a";
    ns_[1] = "plait-t" + id + "-b";
    const std::string veth_a = "plt" + id + "a", veth_b = "plt" + id + "b";
    std::ostringstream script;
    script << "set -e\n"
           << "ip netns add " << ns_[0] << "\nip netns add " << ns_[1] << "\n"
           << "ip link add " << veth_a << " type veth peer name " << veth_b << "\n"
           << "ip link set " << veth_a << " netns " << ns_[0] << "\n"
           << "ip link set " << veth_b << " netns " << ns_[1] << "\n"
           << "ip -n " << ns_[0] << " addr add 192.168.213.1/24 dev " << veth_a << "\n"
           << "ip -n " << ns_[1] << " addr add 192.168.213.2/24 dev " << veth_b << "\n"
           << "for n in " << ns_[0] << " " << ns_[1] << "; do ip -n $n link set lo up; done\n"
           << "ip -n " << ns_[0] << " link set " << veth_a << " up\n"
           << "ip -n " << ns_[1] << " link set " << veth_b << " up\n";
    JobResult r = run_command({"sh", "-c", script.str()}, {}, 30);
    if (r.status != 0) {
      TearDown();
      GTEST_SKIP() << "cannot build network namespaces here: " << r.output;
    }
  }
  void TearDown() override {
    for (const std::string& ns : ns_)
      if (!ns.empty()) run_command({"ip", "netns", "del", ns}, {}, 30);
  }

  // Runs `plait bench <args>` as `world` ranks, rank r in namespace r % 2 (so with 4 ranks
  // each namespace, a "host", holds two); returns every rank's output, rank 0's first.
  JobResult bench_across(const std::string& args, int world = 2, const std::string& env = "") {
    // Per process: ctest runs this file's tests in parallel.
    const std::string dir = ::testing::TempDir() + "plait-netns-" + std::to_string(::getpid()) + "-";
    std::ostringstream script;
    for (int r = 0; r < world; ++r) {
      script << "ip netns exec " << ns_[r % 2] << " env RANK=" << r << " WORLD_SIZE=" << world
             << " LOCAL_RANK=" << r / 2 << " LOCAL_WORLD_SIZE=" << world / 2
             << " MASTER_ADDR=192.168.213.1 MASTER_PORT=29611 PLAIT_CONNECT_TIMEOUT=30000"
             << " PLAIT_TIMEOUT=60000 " << env << " " << plait_bin() << " bench " << args
             << " > " << dir << "netns-rank" << r << ".log 2>&1 &\np" << r << "=$!\n";
    }
    std::string status = "true";
    for (int r = 0; r < world; ++r) {
      script << "wait $p" << r << "; s" << r << "=$?\n";
      status += " && [ $s" + std::to_string(r) + " -eq 0 ]";
    }
    for (int r = 0; r < world; ++r) script << "cat " << dir << "netns-rank" << r << ".log\n";
    script << status << "\n";
    return run_command({"bash", "-c", script.str()}, {}, 120);
  }

  std::string ns_[2];
};

TEST_F(TwoHosts, CollectivesRunAcrossNamespaces) {
  JobResult r = bench_across("allreduce --check --min 8 --max 4M --factor 16 --iters 3");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("# Wrong elements: 0"), std::string::npos) << r.output;
  r = bench_across("broadcast --check --min 1K --max 1M --factor 32 --iters 3 --root 1");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("# Wrong elements: 0"), std::string::npos) << r.output;
}

// Two "hosts" of two ranks each: shm inside a namespace, tcp across the veth pair, and the
// hierarchical allreduce (reduce-scatter inside, allreduce across, allgather inside).
TEST_F(TwoHosts, HierarchicalAllreduceOverShmAndTcp) {
  JobResult r = bench_across("allreduce --check --min 8 --max 4M --factor 16 --iters 3 --algo hierarchical",
                             4, "PLAIT_LOG=info");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("# Wrong elements: 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("shm to ranks 2, tcp to ranks 1,3"), std::string::npos) << r.output;
  // Without forcing, the cost model picks it for large vectors across the slower link.
  r = bench_across("allreduce --check --min 16M --max 16M --iters 2", 4, "PLAIT_LOG=info");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("hierarchical"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace plait::testing
