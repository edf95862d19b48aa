// Multi-process test support: a test binary doubles as the rank program. The parent test
// starts `plait run -n N -- <this binary>` with PLAIT_TEST_CHILD=<mode>; in each rank, a
// static ChildMode registered under that name runs before gtest's main and exits with its
// return value.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace plait::testing {

struct JobResult {
  int status = -1;     // exit status of `plait run` (or 128 + signal)
  std::string output;  // stdout and stderr together
  double seconds = 0;
};

// Runs `plait run -n nranks -- <this test binary>` in child mode `mode`, with extra
// environment variables, killing it after `timeout_s` (reported as status -1).
JobResult run_job(int nranks, const std::string& mode,
                  const std::map<std::string, std::string>& env = {}, int timeout_s = 300);

// Runs an arbitrary command line (argv) with extra environment, capturing output.
JobResult run_command(const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& env = {}, int timeout_s = 300);

// Registers a rank program under a name (use as a namespace-scope static).
// One rank started by spawn_ranks.
struct RankResult {
  int rank = -1;
  int status = -1;  // exit status, 128 + signal, or -1 if the harness had to kill it
  std::string output;
};

// Starts ranks of a `world`-rank job directly (no `plait run`), hosting the store in this
// process, so a test sees every rank's own exit status and output even when some fail.
// `start` lists the ranks to start (others never join); `env_for(rank)` adds variables.
// `while_running`, if given, runs on a thread of its own once every rank is started, with the
// store's port and the ranks' pids; it is joined before the results are returned.
std::vector<RankResult> spawn_ranks(
    int world, const std::vector<int>& start, const std::string& mode,
    const std::function<std::map<std::string, std::string>(int)>& env_for, int timeout_s = 120,
    const std::function<void(int store_port, const std::vector<pid_t>& pids)>& while_running =
        nullptr);

class ChildMode {
 public:
  ChildMode(const char* name, std::function<int()> body);
};

// Called first by the multi-process tests' main(): runs the registered mode named by
// PLAIT_TEST_CHILD and returns its exit code, or -1 when not in child mode.
int run_child_mode_if_requested();

// The path of the `plait` tool (PLAIT_BIN, set by ctest).
std::string plait_bin();

// This test binary's path (what ranks started in a child mode run).
std::string self_exe();

// How often `needle` occurs in `text` (ranks' "ok" lines, error lines).
inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace plait::testing
