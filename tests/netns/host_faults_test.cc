// Faults on a testbed of two hosts (network namespaces), two ranks each, while they run
// allreduces: a host whose traffic vanishes, a host whose link goes down, a rank killed, a
// rank stopped. Between the hosts, the tcp provider, and the ucx provider over UCX's tcp
// transport (shm within each host either way). Every rank that is left must fail within the timeout (the harness kills a
// rank still running 60 s after the fault) with an error that names the operation and a
// peer; the test prints, per rank, the seconds from the fault to its exit and the message.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "plait/plait.h"
#include "support/netns_testbed.h"

namespace plait::testing {
namespace {

// Allreduces of 256 KiB, checked, until an error (or PLAIT_TEST_ITERS of them, 100000 by
// default: the fault comes first).
int allreduce_loop_child() {
  try {
    auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
    const int n = comm->size();
    std::vector<float> in(65536, 1.0f), out(in.size());
    std::printf("started\n");
    std::fflush(stdout);
    const char* iters = std::getenv("PLAIT_TEST_ITERS");
    const int count = iters ? std::atoi(iters) : 100000;
    for (int i = 0; i < count; ++i) {
      comm->allreduce(in.data(), out.data(), in.size(), DataType::kF32, ReduceOp::kSum)->wait();
      if (out[0] != static_cast<float>(n) || out.back() != static_cast<float>(n)) {
        std::printf("WRONG %g\n", out[0]);
        return 4;
      }
    }
  } catch (const Error& e) {
    std::printf("ERROR %s\n", e.what());
    return 3;
  }
  return 0;
}
ChildMode loop_mode("netns_allreduce_loop", allreduce_loop_child);

// The line a rank printed for its error.
std::string error_line(const std::string& out) {
  const size_t at = out.find("ERROR ");
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

// The provider between the hosts: "tcp" (auto mode without an RDMA NIC) or "ucx".
class TwoHostFaults : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (auto why = NetnsTestbed::unavailable()) GTEST_SKIP() << *why;
    testbed_.emplace(2);
  }

  // Ranks 0, 2 on host 0 and 1, 3 on host 1; the fault 3 s into the run. Every rank not in
  // `out` must end with an error naming an operation (allreduce #N) and a peer.
  void expect_named(const char* fault_name, const NetnsTestbed::Fault& fault, const std::vector<int>& out) {
    std::map<std::string, std::string> env = {{"PLAIT_TIMEOUT", "4000"},
                                              {"PLAIT_CONNECT_TIMEOUT", "30000"}};
    if (GetParam() == "ucx") {
      env["PLAIT_TRANSPORT"] = "shm+ucx";
      env["PLAIT_UCX_TLS"] = "tcp";
    }
    auto ranks = testbed_->run({0, 1, 0, 1}, "netns_allreduce_loop", env,
                               std::chrono::seconds(3), fault, 60);
    for (const auto& rk : ranks) {
      const int r = rk.result.rank;
      if (std::find(out.begin(), out.end(), r) != out.end()) continue;
      const std::string line = error_line(rk.result.output);
      std::printf("%s, %s: rank %d (host %d) exit %d after %.1f s: %s\n", GetParam().c_str(),
                  fault_name, r, r % 2, rk.result.status, rk.exited_s,
                  line.substr(0, 300).c_str());
      EXPECT_NE(rk.result.output.find("started"), std::string::npos) << rk.result.output;
      EXPECT_EQ(rk.result.status, 3) << "rank " << r << ": " << rk.result.output;
      EXPECT_NE(line.find("allreduce #"), std::string::npos) << "rank " << r << ": " << rk.result.output;
      EXPECT_NE(line.find("rank "), std::string::npos) << "rank " << r << ": " << rk.result.output;
    }
  }

  std::optional<NetnsTestbed> testbed_;
};

// Without a fault: the loop's checked allreduces across the hosts all come out right.
TEST_P(TwoHostFaults, WithoutAFaultEveryAllreduceIsRight) {
  std::map<std::string, std::string> env = {{"PLAIT_TEST_ITERS", "300"}};
  if (GetParam() == "ucx") {
    env["PLAIT_TRANSPORT"] = "shm+ucx";
    env["PLAIT_UCX_TLS"] = "tcp";
  }
  for (const auto& rk : testbed_->run({0, 1, 0, 1}, "netns_allreduce_loop", env))
    EXPECT_EQ(rk.result.status, 0) << "rank " << rk.result.rank << ": " << rk.result.output;
}

TEST_P(TwoHostFaults, AHostWhoseTrafficVanishesIsNamed) {
  expect_named("silent host", [&](const std::vector<pid_t>&) {
    testbed_->isolate(1);
    return std::vector<pid_t>{};
  }, {});
}

TEST_P(TwoHostFaults, AHostWhoseLinkGoesDownIsNamed) {
  expect_named("link down", [&](const std::vector<pid_t>&) {
    testbed_->link_down(1);
    return std::vector<pid_t>{};
  }, {});
}

TEST_P(TwoHostFaults, ARankKilledIsNamed) {
  expect_named("SIGKILL", [](const std::vector<pid_t>& pids) {
    ::kill(pids[3], SIGKILL);
    return std::vector<pid_t>{pids[3]};
  }, {3});
}

TEST_P(TwoHostFaults, ARankStoppedIsNamed) {
  expect_named("SIGSTOP", [](const std::vector<pid_t>& pids) {
    ::kill(pids[1], SIGSTOP);
    return std::vector<pid_t>{pids[1]};
  }, {1});
}

INSTANTIATE_TEST_SUITE_P(Between, TwoHostFaults, ::testing::Values("tcp", "ucx"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace plait::testing
