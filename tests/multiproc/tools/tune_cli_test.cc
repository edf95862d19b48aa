// `plait tune` end to end: `$PLAIT_BIN tune -n 2 --quick` launches real ranks, measures over
// a forced provider and writes the tune file, which this test parses back; `plait info`
// then reports that file. Values are checked for sanity only, never for speed.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/job.h"
#include "transport/tuned_costs.h"

namespace plait::testing {
namespace {

constexpr int kTimeoutS = 120;

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "plait_tune_cli_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

JobResult tune(const std::vector<std::string>& args,
               const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> argv = {plait_bin(), "tune"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, env, kTimeoutS);
}

void expect_positive(const transport::TunedCosts& costs, const std::string& scope,
                     const std::string& field) {
  const auto value = costs.get(scope, field);
  ASSERT_TRUE(value.has_value()) << scope << "." << field << " missing";
  EXPECT_GT(*value, 0) << scope << "." << field;
}

TEST(TuneCli, QuickTcpRunWritesAFileThatInfoReports) {
  TempDir dir;
  // A nested path: tune creates the directories. A value from an earlier run of another
  // provider must survive a run that does not measure it.
  const std::string out = dir.file("cache/plait/tune.conf");
  std::filesystem::create_directories(dir.file("cache/plait"));
  std::ofstream(out) << "# earlier run\nshm.alpha_us = 0.7\n";

  JobResult r = tune({"-n", "2", "--quick", "--providers", "tcp", "--out", out});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("tcp "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wrote " + out), std::string::npos) << r.output;

  const transport::TunedCosts costs = transport::load_tuned_costs_file(out);
  ASSERT_TRUE(costs.found) << r.output;
  expect_positive(costs, "tcp", "alpha_us");
  expect_positive(costs, "tcp", "beta_bytes_per_us");
  expect_positive(costs, "host", "gamma_bytes_per_us");
  expect_positive(costs, "host", "copy_bytes_per_us");
  // The round of the shm algorithm, and where the cost model leaves it for messages.
  expect_positive(costs, "host", "flag_us");
  EXPECT_NE(r.output.find("segment   a round of the shm algorithm"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("runs on the segment up to (cost model): np=2 "), std::string::npos)
      << r.output;
  EXPECT_EQ(costs.get("shm", "alpha_us"), 0.7);

  JobResult info = run_command({plait_bin(), "info"}, {{"PLAIT_TUNE_FILE", out}}, kTimeoutS);
  ASSERT_EQ(info.status, 0) << info.output;
  EXPECT_NE(info.output.find("tune file: " + out + " (found"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("tcp.alpha_us = "), std::string::npos) << info.output;
}

// The ucx provider is measured like the others (here over UCX's tcp transport), and a job
// over it reads the constants back.
TEST(TuneCli, QuickUcxRunMeasuresTheUcxProvider) {
  TempDir dir;
  const std::string out = dir.file("tune.conf");
  JobResult r = tune({"-n", "2", "--quick", "--providers", "ucx", "--out", out},
                     {{"PLAIT_UCX_TLS", "tcp"}});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("ucx "), std::string::npos) << r.output;
  const transport::TunedCosts costs = transport::load_tuned_costs_file(out);
  ASSERT_TRUE(costs.found) << r.output;
  expect_positive(costs, "ucx", "alpha_us");
  expect_positive(costs, "ucx", "beta_bytes_per_us");
}

TEST(TuneCli, InfoSaysWhenThereIsNoTuneFile) {
  TempDir dir;
  JobResult info = run_command({plait_bin(), "info"},
                               {{"PLAIT_TUNE_FILE", ""}, {"XDG_CACHE_HOME", dir.file("xdg")}},
                               kTimeoutS);
  ASSERT_EQ(info.status, 0) << info.output;
  EXPECT_NE(info.output.find("tune file: " + dir.file("xdg") + "/plait/tune.conf (not found"),
            std::string::npos)
      << info.output;
}

// Every provider asked for is either measured or skipped with a reason; the run succeeds
// as long as one was measured.
TEST(TuneCli, EveryProviderIsMeasuredOrSkippedWithAReason) {
  TempDir dir;
  const std::string out = dir.file("tune.conf");
  JobResult r = tune({"-n", "2", "--quick", "--providers", "shm,tcp", "--out", out});
  ASSERT_EQ(r.status, 0) << r.output;
  const transport::TunedCosts costs = transport::load_tuned_costs_file(out);
  expect_positive(costs, "tcp", "alpha_us");
  if (costs.get("shm", "alpha_us"))
    expect_positive(costs, "shm", "beta_bytes_per_us");
  else
    EXPECT_NE(r.output.find("skipped: "), std::string::npos) << r.output;
}

// Rank 1 claims another host, so shm cannot start: it is skipped with the reason, tcp is
// still measured, and the run succeeds.
TEST(TuneCli, AProviderThatCannotStartIsSkipped) {
  TempDir dir;
  const std::string out = dir.file("tune.conf");
  const std::string script = "if [ \"$RANK\" = 1 ]; then export PLAIT_HOST_ID=elsewhere; fi; "
                             "exec \"$0\" tune --quick --providers shm,tcp --out \"$1\"";
  JobResult r = run_command(
      {plait_bin(), "run", "-n", "2", "--", "sh", "-c", script, plait_bin(), out}, {}, kTimeoutS);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("shm       skipped: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("on another host"), std::string::npos) << r.output;
  // Ranks on two hosts share no segment: its round is skipped too, naming why.
  EXPECT_NE(r.output.find("segment   skipped: "), std::string::npos) << r.output;
  const transport::TunedCosts costs = transport::load_tuned_costs_file(out);
  expect_positive(costs, "tcp", "alpha_us");
  EXPECT_EQ(costs.get("shm", "alpha_us"), std::nullopt);
  EXPECT_EQ(costs.get("host", "flag_us"), std::nullopt);
}

TEST(TuneCli, UsageErrorsExitTwoBeforeAnyRankStarts) {
  JobResult r = tune({"--providers", "ib"});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("unknown provider 'ib'"), std::string::npos) << r.output;
  r = tune({"-n", "1"});
  EXPECT_EQ(r.status, 2) << r.output;
  r = tune({"--bogus"});
  EXPECT_EQ(r.status, 2) << r.output;
  r = tune({"--help"});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("usage: plait tune"), std::string::npos) << r.output;
}

// --topology: the network's contention from plait sim's model, into the "net" scope, with
// the measured values kept and nothing launched. A fat tree hashing flows: neighbours under
// one edge switch never collide, far exchanges do.
TEST(TuneCli, TopologyWritesTheNetworksContentionAndKeepsTheMeasuredValues) {
  TempDir dir;
  const std::string out = dir.file("tune.conf");
  std::ofstream(out) << "tcp.alpha_us = 14\nnet.contention_at_64 = 9\n";
  JobResult r = tune({"--topology", "fattree:k=4", "--ranks", "32", "--ranks-per-host", "2", "--out", out});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("16 hosts (32 ranks, 2 a host)"), std::string::npos) << r.output;
  const transport::TunedCosts costs = transport::load_tuned_costs_file(out);
  EXPECT_EQ(costs.get("tcp", "alpha_us"), 14.0);
  EXPECT_FALSE(costs.get("net", "contention_at_64").has_value());  // an old network's, gone
  EXPECT_EQ(costs.get("net", "contention_at_1"), 1.0);  // hosts 0-1, 2-3: one edge switch
  for (const char* d : {"2", "4", "8"}) {
    const auto c = costs.get("net", std::string("contention_at_") + d);
    ASSERT_TRUE(c.has_value()) << d;
    EXPECT_GE(*c, 1.0) << d;
  }
  EXPECT_FALSE(costs.get("net", "contention_at_16").has_value());  // 16 hosts: 8 is the farthest
  expect_positive(costs, "net", "ring_contention");

  r = tune({"--topology", "fattree:k=4", "--ranks", "64", "--out", out});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("need 64 hosts; fattree:k=4"), std::string::npos) << r.output;
  r = tune({"--topology", "fattree:k=4", "--out", out});
  EXPECT_EQ(r.status, 2) << r.output;
  r = tune({"--ranks", "8"});
  EXPECT_EQ(r.status, 2) << r.output;
}

}  // namespace
}  // namespace plait::testing
