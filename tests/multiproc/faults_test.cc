// Faults end with a clear error on every affected rank, never a hang: a rank killed in the
// middle of a collective, collectives that differ across ranks, a wrong job token, a rank
// that never joins, a rank that stops participating (timeout), and an explicit abort.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
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

int killed_rank_child() {
  auto comm = join();
  std::vector<float> buf(1 << 20, 1.0f);
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

TEST(Faults, RankKilledMidCollectiveFailsEverySurvivor) {
  auto results = spawn_ranks(4, {0, 1, 2, 3}, "killed_rank",
                             [](int) { return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "60000"}}; });
  for (const auto& r : results) {
    if (r.rank == 2) {
      EXPECT_EQ(r.status, 128 + SIGKILL);
      continue;
    }
    EXPECT_EQ(r.status, 3) << "rank " << r.rank << ": " << r.output;
    EXPECT_NE(r.output.find("ERROR"), std::string::npos) << r.output;
    // Detected through the transport (or a peer's abort notice), not by running out of time.
    EXPECT_EQ(r.output.find("Timed out"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("2"), std::string::npos) << r.output;
  }
}

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
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 3) << "rank " << r.rank << ": " << r.output;
    EXPECT_NE(r.output.find("collective mismatch"), std::string::npos)
        << "rank " << r.rank << ": " << r.output;
    EXPECT_EQ(r.output.find("Timed out"), std::string::npos) << r.output;
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
  EXPECT_NE(results[1].output.find("token"), std::string::npos) << results[1].output;
  // Rank 0 never sees rank 1 arrive and says so.
  EXPECT_EQ(results[0].status, 3) << results[0].output;
  EXPECT_NE(results[0].output.find("1"), std::string::npos) << results[0].output;
}

TEST(Faults, RankThatNeverJoinsIsNamedAfterTheConnectTimeout) {
  auto results = spawn_ranks(4, {0, 1, 2}, "join", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_CONNECT_TIMEOUT", "3000"}};
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 3) << "rank " << r.rank << ": " << r.output;
    EXPECT_NE(r.output.find("ERROR timeout"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("3"), std::string::npos) << r.output;
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
  auto results = spawn_ranks(3, {0, 1, 2}, "straggler", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "2000"}};
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 3) << "rank " << r.rank << ": " << r.output;
    if (r.rank != 1) EXPECT_NE(r.output.find("Timed out"), std::string::npos) << r.output;
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
    EXPECT_NE(r.output.find("user requested stop"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("ERROR aborted"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace plait::testing
