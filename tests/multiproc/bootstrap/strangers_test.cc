// Strangers at a job's store: while a 4-rank job runs checked allreduces, another party
// connects to the store and sends nothing, garbage, a proof made up of the right magic and a
// wrong MAC, a proof replayed from an earlier handshake, and (having the token) a frame of
// 4 GiB; then it floods the store with 2000 connections. Every one is dropped, the job's
// results are unaffected, and the store's process keeps its descriptors and threads bounded.
// (The tcp provider's listeners, open only while a fabric is set up: tcp_strangers_test.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/socket.h"
#include "plait/plait.h"
#include "support/job.h"
#include "support/strangers.h"

namespace plait::testing {
namespace {

using namespace std::chrono_literals;
using namespace strangers;

constexpr const char* kToken = "test-token";  // spawn_ranks' job token

// 400 checked allreduces over tcp, while the strangers call.
int checked_job_child() {
  try {
    auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(60)));
    const int n = comm->size();
    for (int i = 0; i < 400; ++i) {
      std::vector<float> v(4096, static_cast<float>(comm->rank() + i));
      comm->allreduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kSum)->wait();
      const float want = static_cast<float>(n * (n - 1) / 2 + n * i);
      if (v[0] != want || v.back() != want) {
        std::printf("WRONG at %d: %g, not %g\n", i, v[0], want);
        return 4;
      }
    }
    std::printf("ok\n");
  } catch (const Error& e) {
    std::printf("ERROR %s\n", e.what());
    return 3;
  }
  return 0;
}
ChildMode checked_job("strangers_checked_job", checked_job_child);

TEST(Strangers, AreDroppedAndTheJobIsUnaffected) {
  ::setenv("PLAIT_STORE_MAX_HANDSHAKES", "16", 1);  // read by the store this process hosts
  const int fds_before = count_entries("/proc/self/fd");
  Visit v;
  int max_fds = 0, max_threads = 0;
  auto results = spawn_ranks(
      4, {0, 1, 2, 3}, "strangers_checked_job",
      [](int) {
        return std::map<std::string, std::string>{{"PLAIT_TRANSPORT", "tcp"},
                                                  {"PLAIT_TIMEOUT", "60000"}};
      },
      180,
      [&](int store_port, const std::vector<pid_t>&) {
        std::vector<net::Fd> held;
        visit(store_port, "store", kToken, v, held);
        // A flood: 2000 connections to the store that say nothing, held for a while.
        for (int i = 0; i < 2000; ++i) {
          try {
            held.push_back(dial(store_port));
          } catch (const Error&) {
            break;  // our own side ran out: the point is made
          }
        }
        for (int i = 0; i < 20; ++i) {
          std::this_thread::sleep_for(100ms);
          max_fds = std::max(max_fds, count_entries("/proc/self/fd") - static_cast<int>(held.size()));
          max_threads = std::max(max_threads, count_entries("/proc/self/task"));
        }
      });
  ::unsetenv("PLAIT_STORE_MAX_HANDSHAKES");
  for (const std::string& f : v.failures) ADD_FAILURE() << f;
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 0) << "rank " << r.rank << ": " << r.output;
    EXPECT_NE(r.output.find("ok"), std::string::npos) << r.output;
  }
  // The store accepts no faster than it authenticates (16 at once): the flood waits in the
  // kernel's listen queue, not in this process's descriptors or threads.
  std::printf("store process during the flood: %d descriptors (besides the flood's own), %d "
              "threads; %d before\n", max_fds, max_threads, fds_before);
  EXPECT_LT(max_fds, fds_before + 64);
  EXPECT_LT(max_threads, 40);
}

}  // namespace
}  // namespace plait::testing
