// Faults end with a clear error on every affected rank, never a hang: a rank killed in the
// middle of a collective, collectives that differ across ranks, a wrong job token, a rank
// that never joins, a rank that stops participating (timeout), and an explicit abort.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "plait/plait.h"
#include "support/job.h"

namespace plait::testing {
namespace {

std::shared_ptr<Communicator> join() {
  return Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
}

// Prints the error as "ERROR <category>: <what>" and exits 3, so tests can read both.
int report(const Error& e) {
  std::printf("ERROR %s: %s\n", std::string(to_string(e.category())).c_str(), e.what());
  return 3;
}

// The line report() printed; the library's own log lines (which may name a rank in passing)
// are not the error a rank's caller gets, so tests read this line alone.
std::string error_line(const std::string& output) {
  size_t at = output.rfind("ERROR ");
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

int killed_rank_child() {
  auto comm = join();
  // 4 MiB runs on messages; a small count on the collective segment (flags, no messages).
  const char* count = std::getenv("PLAIT_TEST_COUNT");
  std::vector<float> buf(count ? std::strtoul(count, nullptr, 10) : 1 << 20, 1.0f);
  try {
    for (int i = 0; i < 1000; ++i) {
      if (comm->rank() == 2 && i == 3) ::kill(::getpid(), SIGKILL);
      comm->allreduce(buf.data(), buf.data(), buf.size(), DataType::kF32, ReduceOp::kMax)->wait();
    }
  } catch (const Error& e) {
    return report(e);
  }
  return 0;
}
ChildMode killed_rank("killed_rank", killed_rank_child);

// How each transport names a peer that died: its own words depend on what was in flight.
struct DeathNotice {
  const char* name;
  const char* transport;
  const char* pattern;  // a regex
  const char* count = nullptr;  // elements per allreduce (PLAIT_TEST_COUNT), default 1M
  // Two simulated hosts (ranks 0, 2 and 1, 3) and the hierarchical allreduce: rank 2 dies
  // in its host's segment stage, while rank 0 waits for its flag there.
  bool two_hosts = false;
  const char* ucx_tls = nullptr;  // PLAIT_UCX_TLS, for the ucx provider
};

void PrintTo(const DeathNotice& notice, std::ostream* os) { *os << notice.transport; }

class KilledRank : public ::testing::TestWithParam<DeathNotice> {};

TEST_P(KilledRank, EverySurvivorNamesTheDeadRank) {
  const DeathNotice notice = GetParam();
  auto results = spawn_ranks(4, {0, 1, 2, 3}, "killed_rank", [&](int rank) {
    std::map<std::string, std::string> env{{"PLAIT_TIMEOUT", "60000"},
                                           {"PLAIT_TRANSPORT", notice.transport}};
    if (notice.count) env["PLAIT_TEST_COUNT"] = notice.count;
    if (notice.ucx_tls) env["PLAIT_UCX_TLS"] = notice.ucx_tls;
    if (notice.two_hosts) {
      env["PLAIT_HOST_ID"] = "h" + std::to_string(rank % 2);
      env["PLAIT_ALGO_ALLREDUCE"] = "hierarchical";
    }
    return env;
  });
  for (const auto& r : results) {
    if (r.rank == 2) {
      EXPECT_EQ(r.status, 128 + SIGKILL);
      continue;
    }
    EXPECT_EQ(r.status, 3) << "rank " << r.rank << ": " << r.output;
    const std::string error = error_line(r.output);
    // Detected through the transport (or a peer's abort notice), not by running out of time.
    EXPECT_EQ(error.find("Timed out"), std::string::npos) << r.output;
    // Every survivor's own error names the dead rank, whether it waited for rank 2 itself or
    // learnt of the death from a peer's abort notice.
    EXPECT_TRUE(std::regex_search(error, std::regex(notice.pattern)))
        << "rank " << r.rank << ": " << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Faults, KilledRank,
    ::testing::Values(
        DeathNotice{"shm", "shm", "rank 2 \\(pid [0-9]+\\) (died without shutting down its fabric|is gone: )"},
        DeathNotice{"tcp", "tcp", "rank 2 closed the connection \\(stream [0-9]+\\) without a goodbye|"
                           "connection to rank 2 \\(stream [0-9]+\\) failed: "},
        // Survivors wait on rank 2's flags in the collective segment, not on a message.
        DeathNotice{"segment", "shm",
                    "rank 2 failed while this rank waited for it to [a-z ]+ round [0-9]+ of [0-9]+ "
                    "of allreduce #[0-9]+ .* over the collective segment: rank 2 \\(pid [0-9]+\\) "
                    "died without shutting down its fabric",
                    "64"},
        // The same within one host of two, in the hierarchical allreduce's reduce to rank 0
        // there; the other host's ranks learn it from rank 0's abort notice.
        DeathNotice{"host_segment", "auto",
                    "rank 2 failed while this rank waited for it to [a-z ]+ round [0-9]+ of [0-9]+ "
                    "of allreduce #[0-9]+ .* over the collective segment: rank 2 \\(pid [0-9]+\\) "
                    "died without shutting down its fabric",
                    "64", true},
        // UCX's tcp transport reports the broken connection on the endpoint (error handling
        // mode peer); its shared-memory ones cannot, and the provider watches the process.
        DeathNotice{"ucx_tcp", "ucx",
                    "rank 2's UCX endpoint failed: |rank 2 \\(pid [0-9]+\\) died without", nullptr,
                    false, "tcp"},
        DeathNotice{"ucx_sm", "ucx", "rank 2 \\(pid [0-9]+\\) died without shutting down its fabric",
                    nullptr, false, "sm"}),
    [](const auto& info) { return std::string(info.param.name); });

int mismatch_child(const char* kind) {
  auto comm = join();
  std::vector<float> buf(64, 1.0f);
  const int me = comm->rank();
  try {
    std::string k = kind;
    if (k == "count") {
      comm->allreduce(buf.data(), buf.data(), me == 1 ? 10 : 12, DataType::kF32, ReduceOp::kSum)->wait();
    } else if (k == "dtype") {
      comm->allreduce(buf.data(), buf.data(), 8, me == 1 ? DataType::kI32 : DataType::kF32, ReduceOp::kSum)->wait();
    } else if (k == "op") {
      if (me == 1) comm->broadcast(buf.data(), buf.data(), 8, DataType::kF32, 0)->wait();
      else comm->allreduce(buf.data(), buf.data(), 8, DataType::kF32, ReduceOp::kSum)->wait();
    } else if (k == "root") {
      comm->broadcast(buf.data(), buf.data(), 8, DataType::kF32, me == 1 ? 1 : 0)->wait();
    } else if (k == "redop") {
      comm->allreduce(buf.data(), buf.data(), 8, DataType::kF32, me == 1 ? ReduceOp::kMax : ReduceOp::kSum)->wait();
    } else if (k == "avg") {  // AVG is a sum on the wire, but not the same collective
      comm->allreduce(buf.data(), buf.data(), 8, DataType::kF32, me == 1 ? ReduceOp::kAvg : ReduceOp::kSum)->wait();
    }
    // A rank whose part needed no message from a disagreeing peer (a root that only sends)
    // may finish the mismatched collective; its next operation reports the mismatch.
    comm->barrier()->wait();
  } catch (const Error& e) {
    return report(e);
  }
  return 0;
}
ChildMode mismatch_count("mismatch_count", [] { return mismatch_child("count"); });
ChildMode mismatch_dtype("mismatch_dtype", [] { return mismatch_child("dtype"); });
ChildMode mismatch_op("mismatch_op", [] { return mismatch_child("op"); });
ChildMode mismatch_root("mismatch_root", [] { return mismatch_child("root"); });
ChildMode mismatch_redop("mismatch_redop", [] { return mismatch_child("redop"); });
ChildMode mismatch_avg("mismatch_avg", [] { return mismatch_child("avg"); });

class Mismatch : public ::testing::TestWithParam<std::string> {};

TEST_P(Mismatch, EveryRankGetsAnErrorNamingTheMismatch) {
  auto results = spawn_ranks(3, {0, 1, 2}, "mismatch_" + GetParam(), [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "60000"}};
  });
  // Rank 1 is the odd one out. Its error names the peer that disagrees with it; every other
  // rank's names rank 1, from its own check or from the abort notice of the rank that saw it.
  const std::regex names_rank_1(
      "rank 1: [^:]+: collective mismatch: this rank is in .* but rank [02] is in |"
      "collective mismatch: this rank is in .* but rank 1 is in ");
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 3) << "rank " << r.rank << ": " << r.output;
    const std::string error = error_line(r.output);
    EXPECT_TRUE(std::regex_search(error, names_rank_1)) << "rank " << r.rank << ": " << r.output;
    EXPECT_EQ(error.find("Timed out"), std::string::npos) << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, Mismatch,
                         ::testing::Values("count", "dtype", "op", "root", "redop", "avg"));

int join_child() {
  try {
    auto comm = join();
    comm->barrier()->wait();
  } catch (const Error& e) {
    return report(e);
  }
  return 0;
}
ChildMode join_mode("join", join_child);

TEST(Faults, WrongJobTokenIsRefused) {
  auto results = spawn_ranks(2, {0, 1}, "join", [](int rank) {
    std::map<std::string, std::string> env{{"PLAIT_CONNECT_TIMEOUT", "5000"}};
    if (rank == 1) env["PLAIT_JOB_TOKEN"] = "not-the-token";
    return env;
  });
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1].status, 3) << results[1].output;
  EXPECT_NE(error_line(results[1].output)
                .find("store connect: job token rejected by store at 127.0.0.1:"),
            std::string::npos)
      << results[1].output;
  // Rank 0 never sees rank 1 arrive and says so.
  EXPECT_EQ(results[0].status, 3) << results[0].output;
  EXPECT_NE(error_line(results[0].output).find("rank(s) 1 never joined"), std::string::npos)
      << results[0].output;
}

TEST(Faults, RankThatNeverJoinsIsNamedAfterTheConnectTimeout) {
  auto results = spawn_ranks(4, {0, 1, 2}, "join", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_CONNECT_TIMEOUT", "3000"}};
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 3) << "rank " << r.rank << ": " << r.output;
    const std::string error = error_line(r.output);
    EXPECT_EQ(error.rfind("ERROR timeout: rank " + std::to_string(r.rank) + ": ", 0), 0u)
        << r.output;
    EXPECT_NE(error.find("timed out after 3000 ms: rank(s) 3 never joined"), std::string::npos)
        << r.output;
  }
}

int straggler_child() {
  auto comm = join();
  float x = 1;
  try {
    if (comm->rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(6));
    comm->allreduce(&x, &x, 1, DataType::kF32, ReduceOp::kSum)->wait();
  } catch (const Error& e) {
    return report(e);
  }
  return 0;
}
ChildMode straggler("straggler", straggler_child);

TEST(Faults, RankThatStopsParticipatingTimesOutWithItsName) {
  // naive: every rank waits for rank 1 itself. With a chained schedule (recursive doubling
  // over 3 ranks) rank 2 waits for rank 0, which waits for rank 1, and when rank 2's deadline
  // fires before rank 0's notice arrives, rank 2 names rank 0: true from where it stands, but
  // not the straggler.
  auto results = spawn_ranks(3, {0, 1, 2}, "straggler", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "2000"},
                                              {"PLAIT_ALGO_ALLREDUCE", "naive"}};
  });
  // Whoever runs out of time first, every rank's error (rank 1's too, when it finally calls)
  // says it was rank 1 that nobody heard from.
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 3) << "rank " << r.rank << ": " << r.output;
    EXPECT_NE(error_line(r.output).find("Timed out after 2000 ms waiting for recv from rank 1 "),
              std::string::npos)
        << "rank " << r.rank << ": " << r.output;
  }
}

int abort_child() {
  auto comm = join();
  float x = 0;
  try {
    if (comm->rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm->abort("user requested stop");
      comm->barrier()->wait();  // fails fast: aborted
    } else {
      comm->recv(&x, 1, DataType::kF32, 0, 7)->wait();
    }
  } catch (const Error& e) {
    return report(e);
  }
  return 0;
}
ChildMode abort_mode("abort", abort_child);

TEST(Faults, AbortReachesEveryPeer) {
  auto results = spawn_ranks(3, {0, 1, 2}, "abort", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "60000"}};
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 3) << "rank " << r.rank << ": " << r.output;
    const std::string error = error_line(r.output);
    EXPECT_EQ(error.rfind("ERROR aborted: rank " + std::to_string(r.rank) + ": ", 0), 0u)
        << r.output;
    EXPECT_NE(error.find("rank 0 called abort: user requested stop"), std::string::npos)
        << r.output;
  }
}

}  // namespace
}  // namespace plait::testing
