// `plait sort gen`, `run` and `validate` end to end: ranks of `plait run` each write their
// share of the records, sort them over the shuffle (pull and push), and validate reads the
// output back as one sequence (valsort's checks) and says what is wrong, with an exit status
// a script can test.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "shuffle/gensort.h"
#include "support/job.h"

namespace plait::testing {
namespace {

constexpr int kTimeoutS = 120;

class SortCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "plait_sort_cli_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  JobResult plait(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {plait_bin()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, {}, kTimeoutS);
  }
  std::string dir_;
};

TEST_F(SortCli, RanksWriteTheReferenceRecordsAndValidateChecksThem) {
  JobResult gen = plait({"run", "-n", "3", "--", plait_bin(), "sort", "gen", "--records", "100k",
                         "--out", path("in")});
  ASSERT_EQ(gen.status, 0) << gen.output;
  EXPECT_NE(gen.output.find("records 0..33332 (33333)"), std::string::npos) << gen.output;
  EXPECT_NE(gen.output.find("records 66666..99999 (33334)"), std::string::npos) << gen.output;
  // The first record is gensort's: its key spells JimGrayRIP.
  std::ifstream first(path("in/input-00000"), std::ios::binary);
  std::string key(10, '\0');
  first.read(key.data(), 10);
  EXPECT_EQ(key, "JimGrayRIP");

  // The input is not sorted: validate says where, with exit status 1.
  JobResult unsorted = plait({"sort", "validate", path("in")});
  EXPECT_EQ(unsorted.status, 1) << unsorted.output;
  EXPECT_NE(unsorted.output.find("Records: 100000"), std::string::npos) << unsorted.output;
  EXPECT_NE(unsorted.output.find("First unordered record is record"), std::string::npos);

  for (const char* mode : {"push", "pull"}) {  // pull last: its output is checked below
    JobResult run = plait({"run", "-n", "3", "--", plait_bin(), "sort", "run", "--in", path("in"),
                           "--out", path("out"), "--mode", mode, "--json", path("run.json")});
    ASSERT_EQ(run.status, 0) << run.output;
    EXPECT_NE(run.output.find(std::string("sorted 100000 records (0.010 GB) on 3 ranks, ") + mode),
              std::string::npos)
        << run.output;
    std::ifstream js(path("run.json"));
    const std::string json((std::istreambuf_iterator<char>(js)), std::istreambuf_iterator<char>());
    EXPECT_NE(json.find("\"phases\":{\"read\":"), std::string::npos) << json;
    JobResult valid = plait({"sort", "validate", path("out"), "--expect", path("in")});
    EXPECT_EQ(valid.status, 0) << mode << "\n" << valid.output;
  }
  // Within a memory budget of 1 MB (10 MB of records): sorted runs spilled, served from the
  // spill files, merged on the way to the part files.
  JobResult spilled = plait({"run", "-n", "3", "--", plait_bin(), "sort", "run", "--in", path("in"),
                             "--out", path("spilled"), "--memory", "1M"});
  ASSERT_EQ(spilled.status, 0) << spilled.output;
  EXPECT_NE(spilled.output.find("runs (") , std::string::npos) << spilled.output;
  EXPECT_EQ(spilled.output.find(" 0 runs (0.0 MB) spilled"), std::string::npos) << spilled.output;
  JobResult spilled_valid = plait({"sort", "validate", path("spilled"), "--expect", path("in")});
  EXPECT_EQ(spilled_valid.status, 0) << spilled_valid.output;
  JobResult ok = plait({"sort", "validate", path("out"), "--expect", path("in")});
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("SUCCESS - all records are in order"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("Same records as"), std::string::npos) << ok.output;

  // One record lost: still in order, but not the input's records.
  const std::string last = path("out/part-00002");
  const auto last_size = std::filesystem::file_size(last);
  std::filesystem::resize_file(last, last_size - shuffle::kRecordBytes);
  JobResult short_one = plait({"sort", "validate", path("out"), "--expect", path("in")});
  EXPECT_EQ(short_one.status, 1) << short_one.output;
  EXPECT_NE(short_one.output.find("Differs from"), std::string::npos) << short_one.output;

  // Half a record: a clear error naming the file.
  std::filesystem::resize_file(last, last_size - shuffle::kRecordBytes - 50);
  JobResult torn = plait({"sort", "validate", path("out")});
  EXPECT_EQ(torn.status, 2) << torn.output;
  EXPECT_NE(torn.output.find("part-00002: " + std::to_string(last_size - 150) +
                             " bytes is not a whole number of 100-byte records"),
            std::string::npos)
      << torn.output;

  // The last record of part 0 and the first of part 1 swapped: each file is still in order,
  // only the seam between them is not.
  const auto a_size = std::filesystem::file_size(path("out/part-00000"));
  std::fstream a(path("out/part-00000"), std::ios::in | std::ios::out | std::ios::binary);
  std::fstream b(path("out/part-00001"), std::ios::in | std::ios::out | std::ios::binary);
  std::string last_of_a(shuffle::kRecordBytes, '\0'), first_of_b(shuffle::kRecordBytes, '\0');
  a.seekg(static_cast<std::streamoff>(a_size - shuffle::kRecordBytes));
  a.read(last_of_a.data(), last_of_a.size());
  b.read(first_of_b.data(), first_of_b.size());
  a.seekp(static_cast<std::streamoff>(a_size - shuffle::kRecordBytes));
  a.write(first_of_b.data(), first_of_b.size());
  b.seekp(0);
  b.write(last_of_a.data(), last_of_a.size());
  a.close();
  b.close();
  std::filesystem::resize_file(last, last_size - shuffle::kRecordBytes);  // whole records again
  JobResult seam = plait({"sort", "validate", path("out")});
  EXPECT_EQ(seam.status, 1) << seam.output;
  EXPECT_EQ(seam.output.find("OUT OF ORDER"), std::string::npos) << seam.output;
  EXPECT_NE(seam.output.find("First unordered record is record " +
                             std::to_string(a_size / shuffle::kRecordBytes) + " (1 out of order)"),
            std::string::npos)
      << seam.output;
}

TEST_F(SortCli, BadArgumentsAreClearErrors) {
  JobResult no_count = plait({"sort", "gen", "--records", "lots", "--out", path("x")});
  EXPECT_EQ(no_count.status, 2);
  EXPECT_NE(no_count.output.find("--records takes a record count"), std::string::npos)
      << no_count.output;
  JobResult empty = plait({"sort", "validate", path("nothing-here")});
  EXPECT_EQ(empty.status, 2);
  EXPECT_NE(empty.output.find("nothing-here"), std::string::npos) << empty.output;
}

}  // namespace
}  // namespace plait::testing
