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

  // Runs `plait bench <args>` as rank r of 2 in namespace r; returns rank 0's output.
  JobResult bench_across(const std::string& args) {
    const std::string dir = ::testing::TempDir();
    std::ostringstream script;
    for (int r = 0; r < 2; ++r) {
      script << "ip netns exec " << ns_[r] << " env RANK=" << r
             << " WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=192.168.213.1"
             << " MASTER_PORT=29611 PLAIT_CONNECT_TIMEOUT=30000 PLAIT_TIMEOUT=60000 "
             << plait_bin() << " bench " << args << " > " << dir << "netns-rank" << r
             << ".log 2>&1 &\np" << r << "=$!\n";
    }
    script << "wait $p0; s0=$?; wait $p1; s1=$?; cat " << dir << "netns-rank0.log " << dir
           << "netns-rank1.log; [ $s0 -eq 0 ] && [ $s1 -eq 0 ]\n";
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

}  // namespace
}  // namespace plait::testing
