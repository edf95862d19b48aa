// Peers that fall silent, with an operation timeout far away (PLAIT_TIMEOUT=60s): keep-alives
// (tcp) and the stopped-process check (shm) must name them within the peer timeout
// (PLAIT_PEER_TIMEOUT=3s), also when no operation is pending; and a rank that returns 0
// early is named by the ones still calling collectives. One rank per host unless said.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "plait/plait.h"
#include "support/netns_testbed.h"

namespace plait::testing {
namespace {

const std::map<std::string, std::string> kEnv = {{"PLAIT_TIMEOUT", "60000"},
                                                 {"PLAIT_KEEPALIVE", "500"},
                                                 {"PLAIT_PEER_TIMEOUT", "3000"},
                                                 {"PLAIT_CONNECT_TIMEOUT", "30000"}};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// Allreduces of 256 KiB until an error. With IDLE_AFTER_FIRST=S: one allreduce, then S
// seconds without any operation, then allreduces. With EXIT_RANK=R, rank R returns 0 after
// 20 of them.
int allreduce_child() {
  try {
    auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
    const int n = comm->size();
    const int idle_s = env_int("IDLE_AFTER_FIRST", 0);
    const int exit_rank = env_int("EXIT_RANK", -1);
    std::vector<float> in(65536, 1.0f), out(in.size());
    for (int i = 0; i < 100000; ++i) {
      if (comm->rank() == exit_rank && i == 20) {
        std::printf("leaving early\n");
        return 0;
      }
      comm->allreduce(in.data(), out.data(), in.size(), DataType::kF32, ReduceOp::kSum)->wait();
      if (out[0] != static_cast<float>(n)) {
        std::printf("WRONG %g\n", out[0]);
        return 4;
      }
      if (i == 0) {
        std::printf("started\n");
        std::fflush(stdout);
        if (idle_s > 0) std::this_thread::sleep_for(std::chrono::seconds(idle_s));
      }
    }
  } catch (const Error& e) {
    std::printf("ERROR %s\n", e.what());
    return 3;
  }
  return 0;
}
ChildMode child_mode("netns_silent_peers_allreduce", allreduce_child);

std::string error_line(const std::string& out) {
  const size_t at = out.find("ERROR ");
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

class SilentPeers : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = NetnsTestbed::unavailable()) GTEST_SKIP() << *why;
  }

  // Runs the job with rank r on host_of[r]; checks every rank not in `out` fails naming
  // `culprit` and containing `text`; returns the ranks for timing checks.
  std::vector<NetnsTestbed::Rank> expect_named(
      const char* fault_name, NetnsTestbed& testbed, const std::vector<int>& host_of,
      std::map<std::string, std::string> env, const NetnsTestbed::Fault& fault,
      const std::vector<int>& out, const std::string& text) {
    env.insert(kEnv.begin(), kEnv.end());
    auto ranks = testbed.run(host_of, "netns_silent_peers_allreduce", env,
                             std::chrono::seconds(3), fault, 60);
    for (const auto& rk : ranks) {
      const int r = rk.result.rank;
      if (std::find(out.begin(), out.end(), r) != out.end()) continue;
      const std::string line = error_line(rk.result.output);
      std::printf("%s: rank %d (host %d) exit %d after %.1f s: %s\n", fault_name, r,
                  host_of[static_cast<size_t>(r)], rk.result.status, rk.exited_s,
                  line.substr(0, 400).c_str());
      EXPECT_EQ(rk.result.status, 3) << "rank " << r << ": " << rk.result.output;
      EXPECT_NE(line.find("allreduce #"), std::string::npos) << rk.result.output;
      EXPECT_NE(line.find(text), std::string::npos) << "rank " << r << ": " << rk.result.output;
    }
    return ranks;
  }
};

// Traffic of host 2 vanishes while every rank sits between operations: the keep-alives find
// it, and the next allreduce fails at once with the reason, on every rank.
TEST_F(SilentPeers, AHostThatGoesSilentBetweenOperationsIsFoundByKeepAlives) {
  NetnsTestbed testbed(3);
  auto ranks = expect_named(
      "silent host, idle", testbed, {0, 1, 2}, {{"IDLE_AFTER_FIRST", "10"}},
      [&](const std::vector<pid_t>&) {
        testbed.isolate(2);
        return std::vector<pid_t>{};
      },
      {}, "sent nothing for");
  // Ranks 0 and 1 name rank 2; rank 2 names one of them. Each found it while idle: the
  // silence it reports is the peer timeout, not the 7 s left of its sleep.
  for (const auto& rk : ranks) {
    const std::string line = error_line(rk.result.output);
    if (rk.result.rank != 2) {
      EXPECT_NE(line.find("rank 2 at 10.79.0.3"), std::string::npos) << line;
    }
    EXPECT_NE(rk.result.output.find("PLAIT_PEER_TIMEOUT=3000"), std::string::npos);
  }
}

// A rank stopped with SIGSTOP while collectives run: its peers on other hosts name it within
// the peer timeout, not the operation timeout (60 s).
TEST_F(SilentPeers, AStoppedRankOnAnotherHostIsNamedWithinThePeerTimeout) {
  NetnsTestbed testbed(3);
  auto ranks = expect_named(
      "SIGSTOP, tcp", testbed, {0, 1, 2}, {},
      [](const std::vector<pid_t>& pids) {
        ::kill(pids[1], SIGSTOP);
        return std::vector<pid_t>{pids[1]};
      },
      {1}, "sent nothing for");
  for (const auto& rk : ranks) {
    if (rk.result.rank == 1) continue;
    EXPECT_LT(rk.exited_s, 20.0) << rk.result.output;
    EXPECT_NE(error_line(rk.result.output).find("rank 1 at 10.79.0.2:"), std::string::npos)
        << rk.result.output;
  }
}

// The same on one host, over shared memory: the peers see the process stopped.
TEST_F(SilentPeers, AStoppedRankOnTheSameHostIsNamedWithinThePeerTimeout) {
  NetnsTestbed testbed(1);
  auto ranks = expect_named(
      "SIGSTOP, shm", testbed, {0, 0, 0}, {},
      [](const std::vector<pid_t>& pids) {
        ::kill(pids[1], SIGSTOP);
        return std::vector<pid_t>{pids[1]};
      },
      {1}, "has been stopped for");
  for (const auto& rk : ranks) {
    if (rk.result.rank != 1) {
      EXPECT_LT(rk.exited_s, 20.0) << rk.result.output;
    }
  }
}

// Rank 3 returns 0 after 20 allreduces, as if its loop had a different length: the others
// fail their next allreduce naming it, over tcp (rank 1, another host) and shm (rank 2). A
// rank may instead hear first of a peer that already failed because of it and left (rank 0
// of rank 1, once rank 1 aborted): it names that one, and the job's first error names rank 3.
TEST_F(SilentPeers, ARankThatExitsEarlyIsNamedByTheOthers) {
  NetnsTestbed testbed(2);
  auto ranks = expect_named("exit 0 early", testbed, {0, 1, 0, 1}, {{"EXIT_RANK", "3"}}, nullptr,
                            {3}, "shut down its fabric");
  EXPECT_EQ(ranks[3].result.status, 0) << ranks[3].result.output;
  int naming_rank_3 = 0;
  for (int r = 0; r < 3; ++r)
    naming_rank_3 += error_line(ranks[r].result.output).find("rank 3 shut down its fabric") !=
                     std::string::npos;
  EXPECT_GE(naming_rank_3, 1) << "no rank named rank 3";
}

}  // namespace
}  // namespace plait::testing
