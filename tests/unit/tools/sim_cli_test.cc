// `plait sim topo`: one JSON record per topology, usage errors exit 2 naming the mistake.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "plait/commands.h"

namespace plait::cli {
namespace {

int sim(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return sim_main(static_cast<int>(argv.size()), argv.data());
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(SimCli, TopoWritesOneRecordPerTopology) {
  const std::string json =
      (std::filesystem::temp_directory_path() / ("plait-sim-" + std::to_string(::getpid()) + ".json"))
          .string();
  ASSERT_EQ(sim({"topo", "torus:dims=4x4,rate=200mbit", "fattree:k=4", "--json", json}), 0);
  const std::vector<std::string> lines = lines_of(json);
  std::filesystem::remove(json);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("\"topology\": \"torus:dims=4x4,rate=200mbit,latency=1us\""),
            std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"hosts\": 16"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"diameter\": 4"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"bisection_Gbps\": 1.6"), std::string::npos) << lines[0];  // 8 links
  EXPECT_NE(lines[1].find("\"switches\": 20"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("\"bisection_Gbps\": 8,"), std::string::npos) << lines[1];
  EXPECT_EQ(sim({"topo"}), 0);  // the default comparison
}

TEST(SimCli, AnOperationWritesOneRecordPerAlgorithm) {
  const std::string json = (std::filesystem::temp_directory_path() /
                            ("plait-sim-op-" + std::to_string(::getpid()) + ".json"))
                               .string();
  ASSERT_EQ(sim({"allreduce", "--topology", "star:hosts=4", "--ranks", "8", "--ranks-per-host",
                 "2", "--bytes", "1M", "--json", json}),
            0);
  const std::vector<std::string> lines = lines_of(json);
  std::filesystem::remove(json);
  ASSERT_EQ(lines.size(), 8u);  // naive, ps, ring, halving_doubling, recursive_doubling,
                                // binomial_tree, double_binary_tree, hierarchical
  int model = 0;
  for (const std::string& l : lines) {
    for (const char* field : {"\"op\": \"allreduce\"", "\"ranks\": 8", "\"bytes\": 1048576",
                              "\"time_us\": ", "\"busbw_GBps\": "})
      EXPECT_NE(l.find(field), std::string::npos) << field << " in " << l;
    model += l.find("\"cost_model_choice\": true") != std::string::npos;
  }
  EXPECT_EQ(model, 1);  // the cost model picks exactly one
  EXPECT_EQ(sim({"alltoall", "--topology", "torus:dims=2x2", "--ranks", "4", "--bytes", "64K",
                 "--algo", "ring"}),
            0);
}

// --replay symmetric takes the replay through host 0's ranks where copies differ (a ring
// across a fat tree's pods), which auto replays in full at this size; a tree has no such
// replay and runs in full either way.
TEST(SimCli, ReplaySymmetricIsAskedFor) {
  const std::string json = (std::filesystem::temp_directory_path() /
                            ("plait-sim-replay-" + std::to_string(::getpid()) + ".json"))
                               .string();
  for (const char* mode : {"auto", "symmetric"}) {
    ASSERT_EQ(sim({"allreduce", "--topology", "fattree:k=4,latency=10us", "--ranks", "16",
                   "--bytes", "1M", "--algo", "ring", "--replay", mode, "--json", json}),
              0);
    const std::vector<std::string> lines = lines_of(json);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find(std::string(mode) == "auto" ? "\"method\": \"full\""
                                                         : "\"method\": \"symmetric (shift, slowest copy)\""),
              std::string::npos)
        << lines[0];
  }
  std::filesystem::remove(json);
}

TEST(SimCli, SweepMarksTheFastestAndTheModelsChoiceAtEveryPoint) {
  const std::string json = (std::filesystem::temp_directory_path() /
                            ("plait-sim-sweep-" + std::to_string(::getpid()) + ".json"))
                               .string();
  ASSERT_EQ(sim({"sweep", "allreduce", "--topology", "star:hosts=4", "--topology", "ring:hosts=8",
                 "--ranks", "4,8", "--bytes", "64K,4M", "--json", json}),
            0);
  const std::vector<std::string> lines = lines_of(json);
  std::filesystem::remove(json);
  // star: 4 ranks only (8 do not fit), 2 sizes; ring: 4 and 8 ranks, 2 sizes: 6 points.
  int fastest = 0, model = 0;
  for (const std::string& l : lines) {
    fastest += l.find("\"fastest\": true") != std::string::npos;
    model += l.find("\"cost_model_choice\": true") != std::string::npos;
  }
  EXPECT_EQ(fastest, 6);
  EXPECT_EQ(model, 6);
  EXPECT_EQ(sim({"sweep", "allreduce", "--topology", "star:hosts=4", "--ranks", "4"}), 2);
}

bool is_png(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  return in.gcount() == 8 && std::string(magic, 8) == "\x89PNG\r\n\x1a\n";
}

TEST(SimCli, PlotsAreDrawnWithMatplotlib) {
  const std::string base = (std::filesystem::temp_directory_path() /
                            ("plait-sim-plot-" + std::to_string(::getpid()))).string();
  ASSERT_EQ(sim({"sweep", "allreduce", "--topology", "star:hosts=4", "--ranks", "4", "--bytes",
                 "64K,1M", "--plot", base + "-sweep.png"}),
            0);
  EXPECT_TRUE(is_png(base + "-sweep.png"));
  ASSERT_EQ(sim({"allgather", "--topology", "torus:dims=2x2", "--ranks", "4", "--bytes", "1M",
                 "--plot", base + "-algos.png"}),
            0);
  EXPECT_TRUE(is_png(base + "-algos.png"));
  // Records kept with --json, drawn again later (as bench/sim_projection.sh does).
  ASSERT_EQ(sim({"sweep", "allreduce", "--topology", "star:hosts=4", "--ranks", "4", "--bytes",
                 "64K,1M", "--json", base + ".json"}),
            0);
  ASSERT_EQ(sim({"plot", base + ".json", "--out", base + "-again.png", "--title", "again"}), 0);
  EXPECT_TRUE(is_png(base + "-again.png"));
  for (const char* f : {"-sweep.png", "-algos.png", "-again.png", ".json"})
    std::filesystem::remove(base + f);
}

TEST(SimCli, UsageErrorsExitTwo) {
  EXPECT_EQ(sim({"allreduce", "--topology", "star:hosts=2", "--ranks", "3", "--bytes", "1M"}), 2);
  EXPECT_EQ(sim({"allreduce", "--topology", "star:hosts=4", "--ranks", "4", "--bytes", "1M",
                 "--algo", "quantum"}),
            2);
  EXPECT_EQ(sim({"allreduce", "--topology", "star:hosts=4", "--ranks", "4"}), 2);
  EXPECT_EQ(sim({"allreduce", "--ranks", "4", "--bytes", "1M"}), 2);
  EXPECT_EQ(sim({"topo", "torus:dims=4"}), 2);
  EXPECT_EQ(sim({"topo", "--frobnicate"}), 2);
  EXPECT_EQ(sim({"topo", "--json"}), 2);
  EXPECT_EQ(sim({"replay"}), 2);  // no such operation
  EXPECT_EQ(sim({"plot", "/nonexistent/records.json", "--out", "x.png"}), 2);
  EXPECT_EQ(sim({"plot", "--out", "x.png"}), 2);
  EXPECT_EQ(sim({"allreduce", "--topology", "star:hosts=4", "--ranks", "4", "--bytes", "1M",
                 "--replay", "sometimes"}),
            2);
  EXPECT_EQ(sim({}), 2);
  EXPECT_EQ(sim({"--help"}), 0);
}

TEST(SimCli, AnErrorSaysPlaitSimOnce) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(sim({"barrier", "--topology", "star:hosts=4", "--ranks", "4", "--bytes", "1M"}), 2);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.rfind("plait sim: no operation 'barrier'", 0), 0u) << err;
  EXPECT_EQ(err.find("sim: sim:"), std::string::npos) << err;
}

}  // namespace
}  // namespace plait::cli
