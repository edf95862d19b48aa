// The logger: line format, rank prefix, whole lines under concurrency, and PLAIT_LOG handling
// (checked in fresh processes, since the level is read once per process).
#include "core/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace plait {
namespace {

// Runs `body` with fd 2 pointed at a temporary file and returns what was written there.
std::string capture_stderr(const std::function<void()>& body) {
  std::FILE* file = std::tmpfile();
  EXPECT_NE(file, nullptr);
  int saved = dup(STDERR_FILENO);
  dup2(fileno(file), STDERR_FILENO);
  body();
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string out;
  std::rewind(file);
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, file)) out.append(buf, n);
  std::fclose(file);
  return out;
}

// Tests in this binary run with whatever PLAIT_LOG the caller set; error lines always print.
TEST(Log, ErrorsAreAlwaysEnabled) { EXPECT_TRUE(log_enabled(LogLevel::kError)); }

TEST(Log, LineFormatWithAndWithoutRank) {
  std::string out = capture_stderr([] {
    set_log_rank(-1);
    log_line(LogLevel::kError, "no rank yet");
    set_log_rank(3);
    log_line(LogLevel::kError, "rank known");
    log(LogLevel::kError, "joined ", 42, ' ', 2.5, " ok");
    log_line(LogLevel::kError, "trailing newline kept single\n");
    set_log_rank(-1);
  });
  EXPECT_EQ(out,
            "plait error: no rank yet\n"
            "plait[rank 3] error: rank known\n"
            "plait[rank 3] error: joined 42 2.5 ok\n"
            "plait[rank 3] error: trailing newline kept single\n");
}

TEST(Log, LinesFromManyThreadsStayWhole) {
  constexpr int kThreads = 8, kLines = 200;
  const std::string padding(150, 'x');
  std::string out = capture_stderr([&] {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([t, &padding] {
        for (int i = 0; i < kLines; ++i) log(LogLevel::kError, "t", t, " l", i, " ", padding);
      });
    }
    for (auto& th : threads) th.join();
  });
  std::istringstream lines(out);
  std::string line;
  int count = 0;
  std::vector<int> per_thread(kThreads, 0);
  while (std::getline(lines, line)) {
    ++count;
    int t = -1, i = -1;
    char rest[256] = {};
    ASSERT_EQ(std::sscanf(line.c_str(), "plait error: t%d l%d %255s", &t, &i, rest), 3) << line;
    ASSERT_TRUE(t >= 0 && t < kThreads) << line;
    EXPECT_EQ(rest, padding) << line;
    EXPECT_EQ(i, per_thread[t]++) << "each thread's lines in order";
  }
  EXPECT_EQ(count, kThreads * kLines);
}

// Each EXPECT_EXIT below re-runs this test binary for just that test, so the child reads
// PLAIT_LOG for the first time after the setenv.
class LogLevelFromEnv : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(LogLevelFromEnv, DebugEnablesEverything) {
  EXPECT_EXIT(
      {
        setenv("PLAIT_LOG", "Debug", 1);
        bool all = log_enabled(LogLevel::kDebug) && log_enabled(LogLevel::kInfo);
        log(LogLevel::kInfo, "hello ", 7);
        std::_Exit(all ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "^plait info: hello 7\n$");
}

TEST_F(LogLevelFromEnv, ErrorHidesWarnings) {
  EXPECT_EXIT(
      {
        setenv("PLAIT_LOG", "error", 1);
        log_line(LogLevel::kWarn, "hidden");
        log_line(LogLevel::kError, "shown");
        std::_Exit(log_enabled(LogLevel::kWarn) ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "^plait error: shown\n$");
}

TEST_F(LogLevelFromEnv, UnsetMeansWarn) {
  EXPECT_EXIT(
      {
        unsetenv("PLAIT_LOG");
        bool ok = log_enabled(LogLevel::kWarn) && !log_enabled(LogLevel::kInfo);
        std::_Exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "^$");
}

TEST_F(LogLevelFromEnv, UnknownLevelFallsBackToWarnWithOneWarning) {
  EXPECT_EXIT(
      {
        setenv("PLAIT_LOG", "chatty", 1);
        bool ok = log_enabled(LogLevel::kWarn) && !log_enabled(LogLevel::kInfo) &&
                  !log_enabled(LogLevel::kDebug);
        std::_Exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "^plait warn: PLAIT_LOG='chatty' is not one of error.warn.info.debug; using warn\n$");
}

}  // namespace
}  // namespace plait
