// The shuffle (plait/shuffle.h) on real ranks, pull and push, over shared memory and TCP:
// every rank gets exactly the records every mapper gave its partition, byte for byte and in
// mapper order, over several rounds (one with a rank that maps nothing, one with two runs a
// mapper, one with a run partitioned in place, and with a budget that spills them); a mapper
// that dies is named by the reducers waiting for its block.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plait/plait.h"
#include "plait/shuffle.h"
#include "shuffle/gensort.h"
#include "support/job.h"
#include "support/rank_checks.h"

namespace plait::testing {
namespace {

using namespace std::chrono_literals;
using shuffle::kRecordBytes;

constexpr size_t kRecordsPerRank = 20000;  // 2 MB a rank: many reads of 64 KiB each

// Round k partitions by key byte k: record -> partition key[k] * size / 256.
int partition(const uint8_t* r, int round, int size) { return r[round] * size / 256; }

std::vector<uint8_t> records_of(int rank, size_t count) {
  std::vector<uint8_t> v(count * kRecordBytes);
  shuffle::generate_records(static_cast<shuffle::u128>(rank) * kRecordsPerRank, count,
                            shuffle::RecordFormat::kBinary, v.data());
  return v;
}

shuffle::ShuffleOptions options_from_env() {
  shuffle::ShuffleOptions o;
  const char* mode = std::getenv("SHUFFLE_MODE");
  o.mode = mode && std::string(mode) == "push" ? shuffle::ShuffleMode::kPush : shuffle::ShuffleMode::kPull;
  o.fetch_bytes = 64 * 1024;
  o.in_flight = 3;
  if (const char* budget = std::getenv("SHUFFLE_MEMORY")) o.memory_bytes = std::strtoull(budget, nullptr, 10);
  return o;
}

// Sorts, in both, each mapper's run of records (want's mapper by mapper, as got's must be).
void sort_each_mappers_records(std::vector<uint8_t>& got, std::vector<uint8_t>& want, int round,
                               int n, int me) {
  using Record = std::array<uint8_t, kRecordBytes>;
  auto sort_range = [](std::vector<uint8_t>& v, size_t from, size_t to) {
    std::vector<Record> recs(to - from);
    std::memcpy(recs.data(), v.data() + from * kRecordBytes, recs.size() * kRecordBytes);
    std::sort(recs.begin(), recs.end());
    std::memcpy(v.data() + from * kRecordBytes, recs.data(), recs.size() * kRecordBytes);
  };
  size_t at = 0;
  for (int m = 0; m < n; ++m) {
    const std::vector<uint8_t> theirs = records_of(m, kRecordsPerRank);
    size_t k = 0;
    for (size_t i = 0; i < kRecordsPerRank; ++i)
      if (partition(theirs.data() + i * kRecordBytes, round, n) == me) ++k;
    sort_range(got, at, at + k);
    sort_range(want, at, at + k);
    at += k;
  }
}

int shuffle_child() {
  simulate_hosts();
  auto fabric = rdma::Fabric::create(bootstrap_from_env(30s), {.name = "shuffle"});
  const int n = fabric->size(), me = fabric->rank();
  shuffle::Shuffle s(*fabric, options_from_env());
  for (int round = 0; round < 4; ++round) {
    // Round 1: rank 0 maps nothing (a mapper with no records still takes part).
    auto count = [&](int rank) { return round == 1 && rank == 0 ? 0 : kRecordsPerRank; };
    const std::vector<uint8_t> mine = records_of(me, count(me));
    const auto part = [&](const uint8_t* r) { return partition(r, round, n); };
    if (round == 2) {  // two runs: a reducer gets a mapper's runs one after the other
      const size_t half = count(me) / 3;
      s.map(mine.data(), half, part);
      s.map(mine.data() + half * kRecordBytes, count(me) - half, part);
    } else if (round == 3) {  // a run partitioned in place, then a copied one
      const size_t half = count(me) / 3;
      shuffle::Buffer own(half * kRecordBytes);
      std::memcpy(own.data(), mine.data(), own.size());
      s.map(std::move(own), part);
      s.map(mine.data() + half * kRecordBytes, count(me) - half, part);
    } else {
      s.map(mine.data(), count(me), part);
    }
    const shuffle::Buffer buf = s.exchange();
    std::vector<uint8_t> got(buf.data(), buf.data() + buf.size());
    // What we must get: each mapper's records of our partition, mapper by mapper, in order.
    std::vector<uint8_t> want;
    for (int m = 0; m < n; ++m) {
      const std::vector<uint8_t> theirs = records_of(m, count(m));
      for (size_t i = 0; i < count(m); ++i) {
        const uint8_t* r = theirs.data() + i * kRecordBytes;
        if (partition(r, round, n) == me) want.insert(want.end(), r, r + kRecordBytes);
      }
    }
    CHECK_OR_FAIL(got.size() == want.size(), "round %d: rank %d got %zu bytes, want %zu", round,
                  me, got.size(), want.size());
    if (round == 3) {
      // In place, a run's records of one partition come in no set order: compare each
      // mapper's share as a set (its runs, in place and copied, are one after the other).
      sort_each_mappers_records(got, want, round, n, me);
    }
    CHECK_OR_FAIL(got == want, "round %d: rank %d got the right amount but other bytes", round, me);
  }
  const shuffle::ShuffleStats& st = s.stats();
  CHECK_OR_FAIL(st.records_mapped == (me == 0 ? 3 : 4) * kRecordsPerRank, "mapped %llu",
                static_cast<unsigned long long>(st.records_mapped));
  std::printf("rank %d: shuffle ok (%llu records in, %llu bytes from peers)\n", me,
              static_cast<unsigned long long>(st.records_received),
              static_cast<unsigned long long>(st.bytes_received));
  return 0;
}
ChildMode shuffle_mode("shuffle", shuffle_child);

int dead_mapper_child() {
  auto fabric = rdma::Fabric::create(bootstrap_from_env(30s), {.name = "shuffle"});
  const int n = fabric->size(), me = fabric->rank();
  shuffle::Shuffle s(*fabric, options_from_env());
  const std::vector<uint8_t> mine = records_of(me, kRecordsPerRank);
  s.map(mine.data(), kRecordsPerRank, [&](const uint8_t* r) { return partition(r, 0, n); });
  if (me == 1) {
    std::fflush(stdout);
    ::_exit(0);  // dies with its map output unserved
  }
  try {
    s.exchange();
    std::printf("FAIL: rank %d finished a shuffle whose mapper 1 died\n", me);
    return 1;
  } catch (const Error& e) {
    std::printf("rank %d: %s\n", me, e.what());
    CHECK_OR_FAIL(std::string(e.what()).find("mapper 1") != std::string::npos ||
                      std::string(e.what()).find("rank 1 ") != std::string::npos,
                  "rank %d: the error does not name mapper 1: %s", me, e.what());
  }
  return 0;
}
ChildMode dead_mapper_mode("dead_mapper", dead_mapper_child);

struct ShuffleCase {
  std::string name;
  int ranks;
  std::map<std::string, std::string> env;
};
void PrintTo(const ShuffleCase& c, std::ostream* os) { *os << c.name; }

class ShuffleRounds : public ::testing::TestWithParam<ShuffleCase> {};

TEST_P(ShuffleRounds, EveryRankGetsItsPartitionFromEveryMapperInOrder) {
  std::map<std::string, std::string> env = GetParam().env;
  env["PLAIT_TIMEOUT"] = "60000";
  JobResult r = run_job(GetParam().ranks, "shuffle", env, 300);
  EXPECT_EQ(r.status, 0) << r.output;
  size_t ok = 0;
  for (size_t at = 0; (at = r.output.find("shuffle ok", at)) != std::string::npos; ++at) ++ok;
  EXPECT_EQ(ok, static_cast<size_t>(GetParam().ranks)) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ShuffleRounds,
    ::testing::Values(ShuffleCase{"pull_shm_np3", 3, {}},
                      ShuffleCase{"push_shm_np3", 3, {{"SHUFFLE_MODE", "push"}}},
                      ShuffleCase{"pull_tcp_np4", 4, {{"PLAIT_TRANSPORT", "tcp"}}},
                      ShuffleCase{"push_tcp_np4", 4, {{"PLAIT_TRANSPORT", "tcp"}, {"SHUFFLE_MODE", "push"}}},
                      // Past 1.5 MB of map output, runs go to the spill file; their blocks are
                      // served by read requests, in order, unsorted (no key).
                      ShuffleCase{"pull_tcp_spilled_np3", 3,
                                  {{"PLAIT_TRANSPORT", "tcp"}, {"SHUFFLE_MEMORY", "1500000"}}}),
    [](const auto& info) { return info.param.name; });

TEST(ShuffleFaults, AMapperThatDiesIsNamedByEveryReducer) {
  for (const char* mode : {"pull", "push"}) {
    JobResult r = run_job(3, "dead_mapper",
                          {{"PLAIT_TRANSPORT", "tcp"}, {"PLAIT_TIMEOUT", "20000"}, {"SHUFFLE_MODE", mode}},
                          120);
    EXPECT_EQ(r.status, 0) << mode << "\n" << r.output;
    EXPECT_NE(r.output.find("rank 0: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("rank 2: "), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace plait::testing
