// The stall inspector: a rank that skips a collective is named by every rank, long before
// the timeout, with what it is doing instead; and `plait run` prints the same on SIGUSR1.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "plait/plait.h"
#include "support/job.h"

namespace plait::testing {
namespace {

// Every rank does allreduce #0 and #1; rank 2 then skips #2 and sleeps for 4 s before it
// leaves, while the others wait in #2 (rank 0 says so first).
int skipping_rank_child() {
  try {
    auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
    std::vector<float> v(1024, 1.0f);
    for (int i = 0; i < 3; ++i) {
      if (i == 2 && comm->rank() == 2) {
        std::this_thread::sleep_for(std::chrono::seconds(4));
        return 0;
      }
      if (i == 2 && comm->rank() == 0) {
        std::printf("waiting in allreduce #2\n");
        std::fflush(stdout);
      }
      comm->allreduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kSum)->wait();
    }
  } catch (const Error& e) {
    std::printf("ERROR %s\n", e.what());
    return 3;
  }
  return 0;
}
ChildMode skipping_rank("stall_skipping_rank", skipping_rank_child);

// The report line a rank logged.
std::string report_line(const std::string& output) {
  const size_t at = output.find("stall report");
  return at == std::string::npos ? "" : output.substr(at, output.find('\n', at) - at);
}

TEST(StallInspector, EveryRankNamesTheRankThatSkippedACollective) {
  for (const char* transport : {"shm", "tcp"}) {
    auto results = spawn_ranks(4, {0, 1, 2, 3}, "stall_skipping_rank", [&](int) {
      return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "30000"},
                                                {"PLAIT_STALL_WARN", "1000"},
                                                {"PLAIT_TRANSPORT", transport}};
    });
    for (const auto& r : results) {
      const std::string line = report_line(r.output);
      std::printf("%s, rank %d: %s\n", transport, r.rank, line.c_str());
      EXPECT_NE(line.find("allreduce #2 (count 1024, f32, sum) has waited"), std::string::npos)
          << "rank " << r.rank << ": " << r.output;
      EXPECT_NE(line.find("on ranks 0, 1, 3; rank 2 has not called it: rank 2 is in no "
                          "collective (the last it finished: allreduce #1 (count 1024, f32, sum))"),
                std::string::npos)
          << "rank " << r.rank << ": " << r.output;
    }
    EXPECT_EQ(results[2].status, 0) << results[2].output;
  }
}

// The same job under `plait run`, where nobody waits long enough for a report by itself
// (PLAIT_STALL_WARN=60s): SIGUSR1 makes the launcher ask, and print the answer.
TEST(StallInspector, PlaitRunPrintsAReportOnSigusr1) {
  int out_pipe[2];
  ASSERT_EQ(::pipe(out_pipe), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(out_pipe[1], 2);
    ::close(out_pipe[0]);
    ::setenv("PLAIT_TEST_CHILD", "stall_skipping_rank", 1);
    ::setenv("PLAIT_TIMEOUT", "30000", 1);
    ::setenv("PLAIT_STALL_WARN", "60000", 1);
    const std::string bin = plait_bin(), exe = self_exe();
    ::execl(bin.c_str(), bin.c_str(), "run", "-n", "4", "--", exe.c_str(), nullptr);
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  // Ask once the others wait for rank 2 (it sleeps 4 s).
  std::string output;
  char buf[4096];
  bool asked = false;
  for (ssize_t n; (n = ::read(out_pipe[0], buf, sizeof buf)) > 0;) {
    output.append(buf, static_cast<size_t>(n));
    if (!asked && output.find("waiting in allreduce #2") != std::string::npos) {
      ::kill(pid, SIGUSR1);
      asked = true;
    }
  }
  ::close(out_pipe[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::printf("%s\n", output.c_str());
  EXPECT_NE(output.find("plait run: stall report"), std::string::npos) << output;
  EXPECT_NE(output.find("rank 2 has not called it"), std::string::npos) << output;
}

}  // namespace
}  // namespace plait::testing
