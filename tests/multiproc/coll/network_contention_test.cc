// The network's contention from the tune file (`plait tune --topology`) reaches a job's cost
// model: PLAIT_LOG=info says the model knew it, and on a network where exchanges across hosts
// collide the hypercube algorithms cost what they do there. Without it the log says the model
// assumed a non-blocking network.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "plait/plait.h"
#include "support/job.h"
#include "support/rank_checks.h"

namespace plait::testing {
namespace {

int contention_child() {
  simulate_hosts();
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  std::vector<float> v(size_t{1} << 18, 1.0f);  // 1 MiB
  comm->allreduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kSum)->wait();
  CHECK_OR_FAIL(v[0] == static_cast<float>(comm->size()), "sum %f", v[0]);
  std::printf("contention child ok\n");
  return 0;
}
ChildMode contention_mode("network_contention", contention_child);

// Rank 1 alone on its host has no shared-memory link: its own "intra-host" link is TCP. The
// members must still cost every call alike, or they run different algorithms and hang.
int uneven_hosts_child() {
  simulate_hosts();
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  for (size_t count : {size_t{1}, size_t{1} << 10, size_t{1} << 16, size_t{1} << 20}) {
    std::vector<int32_t> mine(count, comm->rank()), all(count * static_cast<size_t>(comm->size()));
    comm->allgather(mine.data(), all.data(), count, DataType::kI32)->wait();
    CHECK_OR_FAIL(all.back() == comm->size() - 1, "allgather of %zu: %d", count, all.back());
    std::vector<float> v(count, 1.0f);
    comm->allreduce(v.data(), v.data(), count, DataType::kF32, ReduceOp::kSum)->wait();
    CHECK_OR_FAIL(v[0] == static_cast<float>(comm->size()), "allreduce of %zu: %f", count, v[0]);
  }
  std::printf("uneven hosts ok\n");
  return 0;
}
ChildMode uneven_hosts_mode("uneven_hosts", uneven_hosts_child);

std::string tune_file(const std::string& text) {
  char path[] = "/tmp/plait-contention-XXXXXX";
  const int fd = ::mkstemp(path);
  ::close(fd);
  std::ofstream(path) << text;
  return path;
}

// The log line of the allreduce's choice.
std::string choice_line(const std::string& output) {
  const size_t at = output.find("allreduce #");
  if (at == std::string::npos) return {};
  return output.substr(at, output.find('\n', at) - at);
}

TEST(NetworkContention, FromTheTuneFileReachesTheCostModelAndSteersItsChoice) {
  const std::string path = tune_file("net.contention_at_1 = 40\nnet.ring_contention = 1\n");
  JobResult r = run_job(4, "network_contention",
                        {{"PLAIT_TEST_HOSTS", "2"}, {"PLAIT_TUNE_FILE", path}, {"PLAIT_LOG", "info"}}, 120);
  ::unlink(path.c_str());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string line = choice_line(r.output);
  ASSERT_FALSE(line.empty()) << r.output;
  EXPECT_NE(line.find("network contention at 1, 2, 4, ... hosts apart 40, ring 1"), std::string::npos) << line;
  // Halving-doubling's exchange across the two hosts now costs 40 times its bytes: it drops
  // out of the four cheapest, where on a non-blocking network it is among them (below).
  EXPECT_EQ(line.find("halving_doubling"), std::string::npos) << line;
  EXPECT_EQ(line.find("recursive_doubling"), std::string::npos) << line;
}

TEST(NetworkContention, WithoutItTheModelAssumesANonBlockingNetwork) {
  const std::string path = tune_file("host.gamma_bytes_per_us = 4000\n");
  JobResult r = run_job(4, "network_contention",
                        {{"PLAIT_TEST_HOSTS", "2"}, {"PLAIT_TUNE_FILE", path}, {"PLAIT_LOG", "info"}}, 120);
  ::unlink(path.c_str());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string line = choice_line(r.output);
  EXPECT_NE(line.find("a non-blocking network"), std::string::npos) << r.output;
  EXPECT_NE(line.find("halving_doubling"), std::string::npos) << line;
}

TEST(NetworkContention, AFieldTheNetScopeDoesNotKnowIsRefused) {
  const std::string path = tune_file("net.contention_at_3 = 2\n");  // not a power of two
  JobResult r = run_job(2, "network_contention", {{"PLAIT_TUNE_FILE", path}}, 120);
  ::unlink(path.c_str());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("unknown field 'contention_at_3'"), std::string::npos) << r.output;
}

TEST(NetworkContention, MembersAloneOnTheirHostCostCallsAsTheOthersDo) {
  JobResult r = run_job(3, "uneven_hosts", {{"PLAIT_TEST_HOSTS", "2"}, {"PLAIT_TIMEOUT", "20000"}}, 120);
  EXPECT_EQ(r.status, 0) << r.output;
  size_t ok = 0;
  for (size_t at = 0; (at = r.output.find("uneven hosts ok", at)) != std::string::npos; ++at) ++ok;
  EXPECT_EQ(ok, 3u) << r.output;
}

}  // namespace
}  // namespace plait::testing
