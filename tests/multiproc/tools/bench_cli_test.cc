// `plait bench` end to end: `$PLAIT_BIN bench -n N ...` launches real ranks, checks every
// element (--check) and writes JSON records that this test reads back. Also the CLI's
// usage errors, help, --version and `plait info`.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support/job.h"

namespace plait::testing {
namespace {

constexpr int kTimeoutS = 120;

// A file name under the test's temporary directory, removed when the test ends.
class TempFile {
 public:
  TempFile() {
    std::string pattern = ::testing::TempDir() + "plait_bench_XXXXXX";
    int fd = ::mkstemp(pattern.data());
    if (fd >= 0) ::close(fd);
    path_ = pattern;
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

// The raw text of a top-level field of a flat JSON object ("0", "\"ring\"", "null").
std::string json_field(const std::string& line, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const size_t at = line.find(needle);
  if (at == std::string::npos) return "<missing>";
  const size_t start = at + needle.size();
  const size_t end = line.find_first_of(",}", start);
  return line.substr(start, end - start);
}

JobResult bench(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {plait_bin(), "bench"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, {}, kTimeoutS);
}

// Runs a checked sweep and expects `records` JSON lines, each with no wrong element.
void expect_checked_run(const std::vector<std::string>& args, size_t records,
                        const std::string& op, const std::string& ranks = "2") {
  TempFile json;
  std::vector<std::string> full = args;
  full.insert(full.end(), {"--check", "--json", json.path()});
  JobResult r = bench(full);
  const std::string what = ::testing::PrintToString(full) + "\n" + r.output;
  ASSERT_EQ(r.status, 0) << what;
  EXPECT_NE(r.output.find("# Avg bus bandwidth:"), std::string::npos) << what;
  const std::vector<std::string> lines = read_lines(json.path());
  ASSERT_EQ(lines.size(), records) << what;
  for (const std::string& line : lines) {
    EXPECT_EQ(json_field(line, "wrong"), "0") << line;
    EXPECT_EQ(json_field(line, "op"), "\"" + op + "\"") << line;
    EXPECT_EQ(json_field(line, "ranks"), ranks) << line;
    // CPU accounting is present (its value may be 0 with tick-based kernel accounting).
    EXPECT_NE(json_field(line, "cpu_us_per_op"), "<missing>") << line;
    // Per call: min <= median <= max, and the calls' mean (time_us) between min and max.
    const double min = std::stod(json_field(line, "min_us"));
    const double median = std::stod(json_field(line, "median_us"));
    const double max = std::stod(json_field(line, "max_us"));
    const double mean = std::stod(json_field(line, "time_us"));
    EXPECT_GT(min, 0.0) << line;
    EXPECT_LE(min, median) << line;
    EXPECT_LE(median, max) << line;
    EXPECT_LE(min, mean * 1.0001) << line;
    EXPECT_LE(mean, max * 1.0001) << line;
  }
}

TEST(BenchCli, AllreduceCheckedSweep) {
  // 8 B .. 64 KiB doubling: 14 sizes.
  expect_checked_run({"-n", "2", "allreduce", "--min", "8", "--max", "64K"}, 14, "allreduce");
}

TEST(BenchCli, EveryOpChecked) {
  // 8 B .. 1 KiB of f32 over 2 ranks: 8 sizes, each at least one element per rank.
  for (const char* op : {"allreduce", "reduce", "broadcast", "allgather", "reduce_scatter",
                         "alltoall", "gather", "scatter", "sendrecv", "pingpong"}) {
    SCOPED_TRACE(op);
    expect_checked_run({"-n", "2", op, "--max", "1K", "--iters", "3", "--warmup", "1"}, 8, op);
  }
  expect_checked_run({"-n", "2", "barrier", "--iters", "3"}, 1, "barrier");
}

TEST(BenchCli, SyncTimesEachCallAfterABarrier) {
  expect_checked_run({"-n", "3", "allreduce", "--max", "4K", "--iters", "4", "--sync"}, 10,
                     "allreduce", "3");
  JobResult r = bench({"-n", "2", "allgather", "--max", "64", "--iters", "2", "--sync"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("a barrier before each call"), std::string::npos) << r.output;
}

TEST(BenchCli, RootAndThreeRanks) {
  TempFile json;
  JobResult r = bench({"-n", "3", "gather", "--root", "2", "--max", "768", "--iters", "2",
                       "--check", "--json", json.path()});
  ASSERT_EQ(r.status, 0) << r.output;
  for (const std::string& line : read_lines(json.path())) {
    EXPECT_EQ(json_field(line, "wrong"), "0") << line;
    EXPECT_EQ(json_field(line, "root"), "2") << line;
  }
}

TEST(BenchCli, AllreduceRing) {
  TempFile json;
  JobResult r = bench({"-n", "2", "allreduce", "--algo", "ring", "--max", "64K", "--iters", "3",
                       "--check", "--json", json.path()});
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::string> lines = read_lines(json.path());
  ASSERT_FALSE(lines.empty()) << r.output;
  for (const std::string& line : lines) {
    EXPECT_EQ(json_field(line, "algo"), "\"ring\"") << line;
    EXPECT_EQ(json_field(line, "wrong"), "0") << line;
  }
}

// PLAIT_ALGO_<OP> forces the algorithm, and PLAIT_LOG=info says which one ran and why.
TEST(BenchCli, AlgorithmForcedByEnvironmentAndLogged) {
  TempFile json;
  JobResult r = run_command({plait_bin(), "bench", "-n", "3", "allreduce", "--min", "1K",
                             "--max", "1K", "--iters", "2", "--check", "--json", json.path()},
                            {{"PLAIT_ALGO_ALLREDUCE", "binomial_tree"}, {"PLAIT_LOG", "info"}},
                            kTimeoutS);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("binomial_tree, forced by PLAIT_ALGO_ALLREDUCE=binomial_tree"),
            std::string::npos) << r.output;
  for (const std::string& line : read_lines(json.path()))
    EXPECT_EQ(json_field(line, "algo"), "\"binomial_tree\"") << line;
}

// Without an override the cost model chooses, and the record names its choice.
TEST(BenchCli, CostModelChoiceIsReportedAndLogged) {
  TempFile json;
  JobResult r = run_command({plait_bin(), "bench", "-n", "2", "allreduce", "--min", "8",
                             "--max", "8", "--iters", "2", "--json", json.path()},
                            {{"PLAIT_LOG", "info"}}, kTimeoutS);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("cost model"), std::string::npos) << r.output;
  const std::vector<std::string> lines = read_lines(json.path());
  ASSERT_EQ(lines.size(), 1u) << r.output;
  EXPECT_NE(json_field(lines[0], "algo"), "\"auto\"") << lines[0];
}

TEST(BenchCli, ExactInEveryDtypeAndOperator) {
  for (const char* dtype : {"f16", "bf16", "i8", "u8", "f64", "i64"}) {
    for (const char* redop : {"sum", "prod", "min", "max", "avg"}) {
      SCOPED_TRACE(std::string(dtype) + " " + redop);
      expect_checked_run({"-n", "2", "allreduce", "--dtype", dtype, "--redop", redop, "--max",
                          "64", "--iters", "2", "--warmup", "0"},
                         4, "allreduce");
    }
  }
}

TEST(BenchCli, InPlace) {
  for (const char* op : {"allreduce", "reduce", "broadcast", "allgather", "reduce_scatter"}) {
    SCOPED_TRACE(op);
    expect_checked_run({"-n", "2", op, "--inplace", "--max", "1K", "--iters", "2"}, 8, op);
  }
}

TEST(BenchCli, TablePrintedOnceByRankZero) {
  JobResult r = bench({"-n", "2", "broadcast", "--min", "1K", "--max", "1K", "--iters", "2"});
  ASSERT_EQ(r.status, 0) << r.output;
  size_t headers = 0;
  for (size_t at = r.output.find("time(us)"); at != std::string::npos;
       at = r.output.find("time(us)", at + 1))
    ++headers;
  EXPECT_EQ(headers, 1u) << r.output;
  EXPECT_NE(r.output.find("N/A"), std::string::npos) << r.output;  // #wrong without --check
}

TEST(BenchCli, BadOptionExitsTwoWithMessage) {
  JobResult r = bench({"-n", "2", "allreduce", "--frobnicate"});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("plait bench: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--frobnicate"), std::string::npos) << r.output;

  r = bench({"allgatherz"});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("unknown operation"), std::string::npos) << r.output;
}

TEST(BenchCli, RootOutsideTheJobFails) {
  JobResult r = bench({"-n", "2", "broadcast", "--root", "5", "--max", "8"});
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--root 5"), std::string::npos) << r.output;
}

TEST(BenchCli, SingleRankWithoutLauncher) {
  JobResult r = bench({"allreduce", "--max", "64", "--iters", "2", "--check"});
  EXPECT_EQ(r.status, 0) << r.output;
}

// `plait bench rdma`: point to point on the transport, every test over every provider.
TEST(BenchCli, RdmaPointToPointOverEveryProvider) {
  for (const char* transport : {"shm", "tcp", "ucx"}) {
    for (const char* test : {"send_lat", "put_lat", "put_bw"}) {
      // Memory from Fabric::allocate_memory (the default) and the program's own, registered.
      const char* memory = std::string(test) == "put_lat" ? "user" : "fabric";
      SCOPED_TRACE(std::string(transport) + " " + test + " " + memory);
      TempFile json;
      // 8 B, 512 B, 32 KiB.
      JobResult r = run_command({plait_bin(), "bench", "-n", "2", "rdma", "--test", test, "--min",
                                 "8", "--max", "32K", "--factor", "64", "--iters", "20",
                                 "--memory", memory, "--json", json.path()},
                                {{"PLAIT_TRANSPORT", transport}, {"PLAIT_UCX_TLS", "tcp"}},
                                kTimeoutS);
      ASSERT_EQ(r.status, 0) << r.output;
      EXPECT_NE(r.output.find(std::string("over ") + transport + ", " + memory + " memory"),
                std::string::npos) << r.output;
      const std::vector<std::string> lines = read_lines(json.path());
      ASSERT_EQ(lines.size(), 3u) << r.output;
      for (const std::string& line : lines) {
        EXPECT_EQ(json_field(line, "test"), std::string("\"") + test + "\"") << line;
        EXPECT_EQ(json_field(line, "memory"), std::string("\"") + memory + "\"") << line;
        EXPECT_GT(std::stod(json_field(line, "time_us")), 0.0) << line;
      }
    }
  }
  JobResult r = bench({"-n", "2", "rdma", "--test", "put_everything"});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("send_lat, put_lat or put_bw"), std::string::npos) << r.output;
  r = bench({"-n", "2", "rdma", "--memory", "gpu"});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--memory is fabric or user"), std::string::npos) << r.output;
}

// `plait bench ps --check` in every op and consistency, keys split into partitions over two
// servers: the values pulled are checked against what was pushed (or, pulled only, the
// keys' initial values), element by element. (The check once compared pulls only with each
// other, and under ASP and SSP expected a push_pull to return one round's sum: every row
// said WRONG. Under SSP its final pull was checked before the version said every push was
// applied: a push completes once it is in the server's ring; 3 of 40 runs said WRONG.)
TEST(BenchCli, PsCheckedInEveryOpAndMode) {
  for (const char* op : {"push", "pull", "push_pull"}) {
    for (const char* mode : {"bsp", "asp", "ssp"}) {
      SCOPED_TRACE(std::string(op) + " " + mode);
      std::vector<std::string> argv = {plait_bin(), "bench", "-n", "4", "ps", "--servers", "2", "--op", op,
                                       "--mode", mode, "--min", "4K", "--max", "1M", "--factor", "16",
                                       "--iters", "20", "--check"};
      if (std::string(mode) == "ssp") argv.insert(argv.end(), {"--staleness", "1"});
      JobResult r = run_command(argv, {{"PLAIT_PS_PARTITION", "256K"}}, kTimeoutS);
      ASSERT_EQ(r.status, 0) << r.output;
      EXPECT_EQ(count_of(r.output, "  ok\n"), 3u) << r.output;
      EXPECT_EQ(r.output.find("WRONG"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("# check: "), std::string::npos) << r.output;
    }
  }
}

TEST(Cli, HelpVersionInfo) {
  JobResult r = run_command({plait_bin(), "--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output.rfind("plait ", 0), 0u) << r.output;

  r = run_command({plait_bin(), "help"});
  EXPECT_EQ(r.status, 0);
  for (const char* word : {"run", "bench", "info"})
    EXPECT_NE(r.output.find(word), std::string::npos) << r.output;

  r = run_command({plait_bin()});
  EXPECT_EQ(r.status, 2);

  r = run_command({plait_bin(), "bench", "--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("--check"), std::string::npos) << r.output;

  r = run_command({plait_bin(), "info"}, {{"PLAIT_TIMEOUT", "12345"}});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("PLAIT_TIMEOUT"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("12345"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tcp"), std::string::npos) << r.output;

  r = run_command({plait_bin(), "frob"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("unknown command"), std::string::npos) << r.output;
}

// `plait bench compress`: a record per method and size, with the exact wire sizes of the
// fixed-size methods; an unknown method is a usage error naming the known ones.
TEST(BenchCli, CompressEveryMethodAndSize) {
  TempFile json;
  JobResult r = bench({"compress", "--min", "64K", "--max", "256K", "--iters", "3", "--json", json.path()});
  ASSERT_EQ(r.status, 0) << r.output;
  const auto lines = read_lines(json.path());
  ASSERT_EQ(lines.size(), 16u) << r.output;  // 8 methods x 2 sizes
  std::map<std::string, std::string> wire_at_256k;
  for (const auto& line : lines)
    if (json_field(line, "bytes") == "262144") wire_at_256k[json_field(line, "method")] = json_field(line, "wire_bytes");
  EXPECT_EQ(wire_at_256k["\"fp16\""], "131072");
  EXPECT_EQ(wire_at_256k["\"bf16\""], "131072");
  EXPECT_EQ(wire_at_256k["\"int8\""], std::to_string(64 * 4 + 65536));   // 64 chunk scales, a byte a value
  EXPECT_EQ(wire_at_256k["\"sign\""], std::to_string(64 * 4 + 65536 / 8));
  EXPECT_EQ(wire_at_256k["\"topk\""], std::to_string(655 * 8));           // 1 % of 65536 values
  EXPECT_EQ(wire_at_256k["\"randomk\""], std::to_string(8 + 655 * 4));
  EXPECT_EQ(wire_at_256k["\"powersgd\""], std::to_string(4 * 4 * (256 + 256)));
  r = bench({"compress", "--methods", "fp16,zip"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("unknown compression method 'zip'"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace plait::testing
