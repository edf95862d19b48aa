// DirectFileWriter: bytes appended in any pieces come back exactly, whatever their length
// against the 4 KiB blocks and the staging buffers; O_DIRECT where the file system has it,
// the page cache where it has not (tmpfs before Linux 6.6); a failed write is an error naming the file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "plait/error.h"
#include "shuffle/direct_writer.h"

namespace plait::shuffle {
namespace {

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<uint8_t> noise(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

class DirectWriter : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("plait-direct-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(DirectWriter, BytesInAnyPiecesComeBackExactly) {
  constexpr size_t kStage = DirectFileWriter::kStageBytes;
  const std::vector<uint8_t> all = noise(5 * kStage, 7);
  for (size_t total : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, kStage - 1,
                       kStage, kStage + 1, 3 * kStage + 12345, 5 * kStage}) {
    for (size_t piece : {size_t{100}, size_t{1000003}, 2 * kStage + 7}) {
      const std::vector<uint8_t> in(all.begin(), all.begin() + static_cast<long>(total));
      DirectFileWriter w(path("f"));
      for (size_t at = 0; at < total; at += piece) w.append(in.data() + at, std::min(piece, total - at));
      EXPECT_EQ(w.bytes(), total);
      w.close();
      EXPECT_EQ(read_all(path("f")), in) << total << " bytes in pieces of " << piece;
    }
  }
}

TEST_F(DirectWriter, UsesODirectWhereTheFileSystemHasIt) {
  const int probe = ::open(path("probe").c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
  if (probe < 0) GTEST_SKIP() << "the temporary directory's file system has no O_DIRECT";
  ::close(probe);
  DirectFileWriter w(path("f"));
  EXPECT_TRUE(w.direct());
  DirectFileWriter cached(path("g"), /*direct=*/false);
  EXPECT_FALSE(cached.direct());
  const std::vector<uint8_t> in = noise(DirectFileWriter::kStageBytes + 300, 1);
  cached.append(in.data(), in.size());
  cached.close();
  EXPECT_EQ(read_all(path("g")), in);
}

// tmpfs: before Linux 6.6 it refuses O_DIRECT and the writer falls back to the cache; after,
// it takes it. Either way the bytes are the same.
TEST(DirectWriterTmpfs, BytesComeBackExactly) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::string p = "/dev/shm/plait-direct-" + std::to_string(::getpid());
  {
    DirectFileWriter w(p);
    const std::vector<uint8_t> in = noise(2 * DirectFileWriter::kStageBytes + 5, 2);
    w.append(in.data(), in.size());
    w.close();
    EXPECT_EQ(read_all(p), in);
  }
  std::filesystem::remove(p);
}

TEST(DirectWriterFailures, AFullDiskIsAnErrorNamingTheFile) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  DirectFileWriter w("/dev/full", /*direct=*/false);
  const std::vector<uint8_t> in(DirectFileWriter::kStageBytes, 1);
  try {
    for (int i = 0; i < 2 * DirectFileWriter::kStages; ++i) w.append(in.data(), in.size());
    w.close();
    FAIL() << "writing to /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No space"), std::string::npos) << e.what();
  }
}

TEST(DirectWriterFailures, AFileThatCannotBeCreatedIsAnErrorNamingIt) {
  try {
    DirectFileWriter w("/nonexistent-plait-dir/part-00000");
    FAIL() << "a file in a missing directory was created";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-plait-dir/part-00000"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace plait::shuffle
