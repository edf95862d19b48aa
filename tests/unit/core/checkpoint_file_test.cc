// plait::checkpoint files: the payload comes back only whole and unaltered; a truncated,
// altered, foreign or missing file is an error naming the path and the fault; a writer
// killed in the middle leaves the previous checkpoint readable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "plait/checkpoint.h"
#include "plait/error.h"

namespace plait::checkpoint {
namespace {

namespace fs = std::filesystem;

class CheckpointFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("plait-ckpt-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::vector<std::byte> payload(size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 9)) & 0xff);
  return v;
}

void expect_fault(const std::string& file, const std::string& words) {
  try {
    (void)read_file(file);
    ADD_FAILURE() << file << " was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kSystem);
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
  std::string why;
  EXPECT_FALSE(verify_file(file, &why));
  EXPECT_NE(why.find(words), std::string::npos) << why;
}

// expect_fault() without verify_file(): for a file that can be read once.
void expect_fault_once(const std::string& file, const std::string& words) {
  try {
    (void)read_file(file);
    ADD_FAILURE() << file << " was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kSystem);
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointFile, PayloadComesBackWholeAndAnOverwriteReplacesIt) {
  const auto a = payload(100000, 1), b = payload(777, 2);
  write_file(path("c"), a.data(), a.size());
  EXPECT_EQ(read_file(path("c")), a);
  write_file(path("c"), b.data(), b.size());
  EXPECT_EQ(read_file(path("c")), b);
  write_file(path("empty"), nullptr, 0);
  EXPECT_TRUE(read_file(path("empty")).empty());
  EXPECT_TRUE(verify_file(path("c")));
  // No temporary file is left beside it.
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 2u);
}

TEST_F(CheckpointFile, TruncatedAlteredForeignAndMissingFilesAreNamedErrors) {
  const auto a = payload(5000, 3);
  write_file(path("c"), a.data(), a.size());
  const auto bytes = fs::file_size(path("c"));
  fs::copy_file(path("c"), path("short"));
  fs::resize_file(path("short"), bytes - 10);
  expect_fault(path("short"), "a partial write");
  fs::copy_file(path("c"), path("flipped"));
  {
    std::fstream f(path("flipped"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(bytes - 100));
    f.put('\x5a');
  }
  expect_fault(path("flipped"), "fails its SHA-256 check");
  std::ofstream(path("foreign"), std::ios::binary) << std::string(200, 'x');
  expect_fault(path("foreign"), "is not a plait checkpoint");
  std::ofstream(path("tiny"), std::ios::binary) << "PLAIT";
  expect_fault(path("tiny"), "shorter than a checkpoint header");
  expect_fault(path("missing"), "No such file");
}

TEST_F(CheckpointFile, AWriteThatFailsLeavesNoTemporaryFile) {
  const auto a = payload(10, 4);
  EXPECT_THROW(write_file(path("no/such/dir/c"), a.data(), a.size()), Error);
  EXPECT_THROW(write_file(path("c"), nullptr, 5), Error);
  EXPECT_TRUE(fs::is_empty(dir_));
}

// A child rewrites the checkpoint with 64 MiB payloads until it is killed; whenever that
// happens, the file holds one of the payloads whole.
TEST_F(CheckpointFile, AWriterKilledMidWriteLeavesTheLastWholeCheckpoint) {
  const std::string file = path("c");
  const auto first = payload(1 << 20, 5);
  write_file(file, first.data(), first.size());
  for (int round = 0; round < 3; ++round) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Made first, so that the child spends its time writing; the parent's clock starts
      // when the writes do (on a loaded machine making them can take longer than a kill's
      // delay, and a kill then lands before any write).
      const std::vector<std::vector<std::byte>> bigs = {payload(64u << 20, 10), payload(64u << 20, 11),
                                                         payload(64u << 20, 12)};
      const char go = 1;
      if (::write(ready[1], &go, 1) != 1) ::_exit(1);
      for (unsigned i = 0;; ++i) write_file(file, bigs[i % 3].data(), bigs[i % 3].size());
    }
    ::close(ready[1]);
    char go = 0;
    ASSERT_EQ(::read(ready[0], &go, 1), 1);
    ::close(ready[0]);
    // The kill lands inside a write: once a temporary file is there (not after a fixed
    // delay, which a loaded machine can spend before the child writes at all).
    const std::string child_tmp = ".tmp-" + std::to_string(child);
    auto writing = [&] {
      for (const auto& e : fs::directory_iterator(dir_))
        if (e.path().filename().string().find(child_tmp) != std::string::npos) return true;
      return false;
    };
    for (int i = 0; i < 30000 && !writing(); ++i) ::usleep(1000);
    ::usleep(static_cast<useconds_t>(5000 * round));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    const auto back = read_file(file);  // throws if the kill left a part
    const bool known = back == first || back == payload(64u << 20, 10) || back == payload(64u << 20, 11) ||
                       back == payload(64u << 20, 12);
    EXPECT_TRUE(known) << "round " << round << ": " << back.size() << " bytes of an unknown payload";
  }
  // The kills did land inside writes: those leave their temporary files behind.
  size_t partial = 0;
  for (const auto& e : fs::directory_iterator(dir_))
    partial += e.path().filename().string().find(".tmp-") != std::string::npos ? 1 : 0;
  EXPECT_GE(partial, 1u);
}

// Found by fuzz/checkpoint_file_fuzz.cc: a FIFO has no size (fstat says 0), and the payload
// size "file size - header" wrapped to 2^64 - 56; a header claiming exactly that had the
// reader allocate it, and std::length_error escaped instead of a plait::Error.
TEST_F(CheckpointFile, AFifoWhoseHeaderClaimsTheWrappedSizeIsANamedError) {
  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string header("PLAITCKP", 8);
  const uint32_t version = 1, reserved = 0;
  const uint64_t bytes = ~uint64_t{0} - 55;  // 0 - 56, as the reader computed it
  header.append(reinterpret_cast<const char*>(&version), 4);
  header.append(reinterpret_cast<const char*>(&reserved), 4);
  header.append(reinterpret_cast<const char*>(&bytes), 8);
  header.append(32, '\0');
  std::thread writer([&] {
    std::ofstream(fifo, std::ios::binary) << header;  // opening waits for the reader
  });
  struct Join {
    std::thread& t;
    ~Join() { t.join(); }
  } join{writer};
  expect_fault_once(fifo, "has no size to check its header against");
}

}  // namespace
}  // namespace plait::checkpoint
