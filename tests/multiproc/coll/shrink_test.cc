// In-job recovery: a rank dies by SIGKILL in the middle of training-like allreduces, the
// survivors call Communicator::shrink(), every one of them gets the same member list, and
// collectives on the shrunk communicator give exact results. At 3, 4 and 5 ranks, over shared
// memory (messages and the collective segment) and TCP, twice in a row, and with the rank
// that used to be rank 0 among the dead.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "plait/plait.h"
#include "support/job.h"

namespace plait::testing {
namespace {

std::vector<int> ranks_from(const char* text) {
  std::vector<int> out;
  if (text == nullptr) return out;
  std::string s = text;
  for (size_t at = 0; at < s.size();) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    out.push_back(std::stoi(s.substr(at, end - at)));
    at = end + 1;
  }
  return out;
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int r : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(r);
  }
  return s;
}

// Allreduces until one fails (a victim of this phase kills itself at its fourth), checking
// each result; returns the error, or nothing when no one died in 20 rounds.
std::optional<Error> allreduce_until_failure(Communicator& comm, const std::vector<int>& world_of,
                                             int victim, size_t count) {
  std::vector<float> buf(count);
  for (int i = 0; i < 20; ++i) {
    if (world_of[comm.rank()] == victim && i == 3) ::kill(::getpid(), SIGKILL);
    for (auto& x : buf) x = static_cast<float>(world_of[comm.rank()] + 1);
    try {
      comm.allreduce(buf.data(), buf.data(), count, DataType::kF32, ReduceOp::kSum)->wait();
    } catch (const Error& e) {
      return e;
    }
    float expect = 0;
    for (int w : world_of) expect += static_cast<float>(w + 1);
    for (float x : buf)
      if (x != expect) {
        std::printf("BAD allreduce %g != %g\n", x, expect);
        std::exit(4);
      }
  }
  return std::nullopt;
}

// Every collective kind on the shrunk communicator, against values derived from the
// members' world ranks.
bool check_collectives(Communicator& comm, const std::vector<int>& world_of, size_t count) {
  const int n = comm.size(), me = comm.rank();
  std::vector<double> v(count, world_of[me] + 1.0);
  comm.allreduce(v.data(), v.data(), count, DataType::kF64, ReduceOp::kSum)->wait();
  double sum = 0;
  for (int w : world_of) sum += w + 1.0;
  for (double x : v)
    if (x != sum) return false;
  std::vector<int32_t> mine(3, world_of[me]), all(3 * n);
  comm.allgather(mine.data(), all.data(), 3, DataType::kI32)->wait();
  for (int r = 0; r < n; ++r)
    if (all[3 * r] != world_of[r] || all[3 * r + 2] != world_of[r]) return false;
  std::vector<int32_t> b(count, me == n - 1 ? 77 : 0);
  comm.broadcast(b.data(), b.data(), count, DataType::kI32, n - 1)->wait();
  for (int32_t x : b)
    if (x != 77) return false;
  comm.barrier()->wait();
  return true;
}

int shrink_child() {
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  const std::vector<int> victims = ranks_from(std::getenv("PLAIT_TEST_VICTIMS"));
  const size_t count = std::strtoul(std::getenv("PLAIT_TEST_COUNT"), nullptr, 10);
  std::vector<int> world_of(comm->size());
  for (int r = 0; r < comm->size(); ++r) world_of[r] = r;
  const int world_rank = comm->rank();
  try {
    for (int victim : victims) {
      std::optional<Error> failure = allreduce_until_failure(*comm, world_of, victim, count);
      if (!failure) {
        std::printf("BAD no failure seen while rank %d should have died\n", victim);
        return 4;
      }
      std::printf("failed: %s\n", failure->what());
      ShrinkResult shrunk = comm->shrink();
      std::vector<int> now;
      for (int old : shrunk.survivors) now.push_back(world_of[old]);
      std::printf("shrunk: world rank %d is rank %d of %d; survivors %s\n", world_rank,
                  shrunk.comm->rank(), shrunk.comm->size(), list(now).c_str());
      if (now[shrunk.comm->rank()] != world_rank) return 5;
      comm = shrunk.comm;
      world_of = now;
      if (!check_collectives(*comm, world_of, count)) {
        std::printf("BAD collectives after shrink\n");
        return 6;
      }
    }
    // Training goes on: more rounds on the survivors, nobody dies.
    if (allreduce_until_failure(*comm, world_of, -1, count)) return 7;
  } catch (const Error& e) {
    std::printf("ERROR %s\n", e.what());
    return 3;
  }
  std::printf("ok survivors %s\n", list(world_of).c_str());
  return 0;
}
ChildMode shrink_mode("shrink", shrink_child);

struct ShrinkCase {
  const char* name;
  int world;
  const char* victims;  // world ranks, in the order they die
  const char* transport;
  const char* count;  // elements: 64 runs on the collective segment, 1M on messages
};

void PrintTo(const ShrinkCase& c, std::ostream* os) { *os << c.name; }

class Shrink : public ::testing::TestWithParam<ShrinkCase> {};

TEST_P(Shrink, SurvivorsAgreeAndGoOn) {
  const ShrinkCase c = GetParam();
  std::vector<int> all, dead = ranks_from(c.victims), alive;
  for (int r = 0; r < c.world; ++r) {
    all.push_back(r);
    if (std::find(dead.begin(), dead.end(), r) == dead.end()) alive.push_back(r);
  }
  auto results = spawn_ranks(c.world, all, "shrink", [&](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "60000"},
                                              {"PLAIT_TRANSPORT", c.transport},
                                              {"PLAIT_TEST_VICTIMS", c.victims},
                                              {"PLAIT_TEST_COUNT", c.count}};
  });
  ASSERT_EQ(results.size(), all.size());
  for (const auto& r : results) {
    if (std::find(dead.begin(), dead.end(), r.rank) != dead.end()) {
      EXPECT_EQ(r.status, 128 + SIGKILL) << r.output;
      continue;
    }
    EXPECT_EQ(r.status, 0) << "rank " << r.rank << ": " << r.output;
    if (std::getenv("SHOW")) std::printf("%s", r.output.c_str());
    // Every survivor reports the same final member list, and each shrink named the dead.
    EXPECT_NE(r.output.find("ok survivors " + list(alive) + "\n"), std::string::npos)
        << "rank " << r.rank << ": " << r.output;
    EXPECT_EQ(count_of(r.output, "shrunk: "), dead.size()) << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Recovery, Shrink,
    ::testing::Values(ShrinkCase{"three_shm", 3, "1", "shm", "1048576"},
                      ShrinkCase{"four_shm_segment", 4, "2", "shm", "64"},
                      ShrinkCase{"five_tcp", 5, "3", "tcp", "1048576"},
                      ShrinkCase{"four_tcp_rank0", 4, "0", "tcp", "4096"},
                      ShrinkCase{"five_shm_twice", 5, "2,4", "shm", "65536"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace plait::testing
