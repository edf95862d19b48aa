// The progress display of plait sort (tools/plait/sort/phase_progress.h) and how plait run's line
// prefixer passes its redrawn lines through.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "plait/run/output.h"
#include "plait/sort/phase_progress.h"

namespace plait::cli {
namespace {

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::string s;
  std::rewind(f);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) s.append(buf, n);
  return s;
}

TEST(PhaseProgress, DrawsNothingWhenNotWanted) {
  std::FILE* f = std::tmpfile();
  {
    PhaseProgress p("sort", false, f);
    p.begin("read", 1000);
    p.advance(500);
    p.end();
  }
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}

TEST(PhaseProgress, RedrawsAPhaseInPlaceAndLeavesALineWhenItEnds) {
  std::FILE* f = std::tmpfile();
  {
    PhaseProgress p("sort", true, f);
    p.begin("write", 2'000'000'000);
    p.advance(1'000'000'000);
    // The redrawing thread shows the half done within its period; wait for it, bounded.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::string seen;
    while ((seen = contents(f)).find(" 50 %") == std::string::npos &&
           std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_NE(seen.find("sort write    [##########..........]  50 %  1.00 / 2.00 GB"), std::string::npos)
        << seen;
    p.begin("shuffle");  // ends write; shuffle's size is not known ahead
  }
  const std::string out = contents(f);
  std::fclose(f);
  // Redraws end in '\r'; each phase's last line in '\n', saying how long it took.
  EXPECT_NE(out.find("\rsort write    done in "), std::string::npos) << out;
  EXPECT_NE(out.find("s (1.00 GB, "), std::string::npos) << out;
  EXPECT_NE(out.find("sort shuffle  done in "), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
  size_t lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_EQ(lines, 2u) << out;
}

TEST(PhaseProgress, FollowsPlaitProgressOverTheTerminal) {
  ::setenv("PLAIT_PROGRESS", "1", 1);
  EXPECT_TRUE(PhaseProgress::wanted());
  ::setenv("PLAIT_PROGRESS", "0", 1);
  EXPECT_FALSE(PhaseProgress::wanted());
  ::unsetenv("PLAIT_PROGRESS");
  EXPECT_EQ(PhaseProgress::wanted(), ::isatty(STDERR_FILENO) == 1);
}

TEST(LinePrefixer, PassesALineRedrawnInPlaceThroughAtOnce) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  LinePrefixer prefix("[1] ", fds[1]);
  prefix.feed("10 %\r20 %\r");  // no '\n' yet: a progress display
  prefix.feed("done\r\nnext");   // "\r\n" ends a line as '\n' does
  prefix.finish();
  ::close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  EXPECT_EQ(out, "[1] 10 %\r[1] 20 %\r[1] done\r\n[1] next\n");
}

}  // namespace
}  // namespace plait::cli
