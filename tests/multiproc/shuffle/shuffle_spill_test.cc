// The shuffle's sort path on real ranks: map output in many runs, sorted by key, spilled past
// a memory budget and served from the spill files by read requests; reducers merge the runs.
// Every rank checks that what it got is in key order and in its own range, and all ranks
// together that the output's record count and checksum are the input's. Skewed keys (all
// equal, Zipf) go through a budget far below the partition's size, and the reducer's peak
// memory is checked to stay near the budget, not near the partition.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "plait/plait.h"
#include "plait/shuffle.h"
#include "shuffle/all_gather.h"
#include "shuffle/gensort.h"
#include "shuffle/range_partition.h"
#include "shuffle/record_summary.h"
#include "support/job.h"
#include "support/rank_checks.h"

namespace plait::testing {
namespace {

using namespace std::chrono_literals;
using shuffle::kKeyBytes;
using shuffle::kRecordBytes;

size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}
std::string env_text(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// Kilobytes of the process's resident memory: VmRSS now, or VmHWM (its peak).
size_t status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::strtoull(line.c_str() + std::strlen(field) + 1, nullptr, 10);
  return 0;
}

// Records of `rank`, chunk by chunk, keys as SPILL_KEYS says: gensort's (random), all one
// key, or drawn from a Zipf distribution (s = 1.2) over 1000 keys.
void make_chunk(int rank, size_t first, size_t count, const std::string& keys, uint8_t* out) {
  shuffle::generate_records(static_cast<shuffle::u128>(rank) << 40 | first, count,
                            shuffle::RecordFormat::kBinary, out);
  if (keys == "random") return;
  static std::vector<double> cdf;
  if (cdf.empty()) {
    double sum = 0;
    for (int k = 1; k <= 1000; ++k) cdf.push_back(sum += 1.0 / std::pow(k, 1.2));
    for (double& c : cdf) c /= sum;
  }
  for (size_t i = 0; i < count; ++i) {
    uint8_t* key = out + i * kRecordBytes;
    if (keys == "one") {
      std::memset(key, 'k', kKeyBytes);
      continue;
    }
    // The record's own random key picks its Zipf rank.
    uint32_t u;
    std::memcpy(&u, key, 4);
    const double p = (u % 1000000) / 1e6;
    const size_t k = static_cast<size_t>(std::lower_bound(cdf.begin(), cdf.end(), p) - cdf.begin());
    std::snprintf(reinterpret_cast<char*>(key), kKeyBytes + 1, "z%09zu", k);
    key[kKeyBytes] = 0;  // the 11th byte, payload: snprintf's terminator
  }
}

struct Totals {
  uint64_t in_records, out_records;
  shuffle::u128 in_sum, out_sum;
};

int spill_sort_child() {
  auto fabric = rdma::Fabric::create(bootstrap_from_env(30s), {.name = "spill"});
  const int me = fabric->rank();
  const size_t records = env_size("SPILL_RECORDS", 20000), chunk = env_size("SPILL_CHUNK", 2000);
  const size_t budget = env_size("SPILL_BUDGET", 0), mem_bound_kb = env_size("SPILL_MEM_BOUND_KB", 0);
  const std::string keys = env_text("SPILL_KEYS", "random");
  const bool to_sink = env_text("SPILL_SINK", "1") == "1";
  shuffle::ShuffleOptions o;
  o.mode = env_text("SHUFFLE_MODE", "pull") == "push" ? shuffle::ShuffleMode::kPush : shuffle::ShuffleMode::kPull;
  o.fetch_bytes = 64 * 1024;
  o.key_bytes = kKeyBytes;
  o.memory_bytes = budget;
  shuffle::Shuffle s(*fabric, o);
  const size_t base_kb = status_kb("VmRSS:");

  std::vector<uint8_t> buf(chunk * kRecordBytes);
  make_chunk(me, 0, std::min(chunk, records), keys, buf.data());
  const shuffle::RangePartitioner parts =
      shuffle::RangePartitioner::sample(*fabric, buf.data(), std::min(chunk, records), 1000, 1ull << 61);
  Totals t{};
  for (size_t first = 0; first < records; first += chunk) {
    const size_t k = std::min(chunk, records - first);
    make_chunk(me, first, k, keys, buf.data());
    const shuffle::RecordSummary in = shuffle::summarize(buf.data(), k);
    t.in_records += in.records;
    t.in_sum += in.checksum;
    s.map(buf.data(), k, [&](const uint8_t* r) { return parts.partition(r); });
  }
  buf = {};
  shuffle::RecordSummary out;
  bool first_batch = true;
  size_t foreign = 0;
  auto take = [&](const uint8_t* r, size_t count) {
    for (size_t i = 0; i < count; ++i) foreign += parts.partition(r + i * kRecordBytes) != me;
    const shuffle::RecordSummary piece = shuffle::summarize(r, count);
    if (first_batch) out = piece; else out.append(piece);
    first_batch = false;
  };
  if (to_sink) {
    s.exchange(take);
  } else {
    const shuffle::Buffer all = s.exchange();
    if (!all.empty()) take(all.data(), all.size() / kRecordBytes);
  }
  t.out_records = out.records;
  t.out_sum = out.checksum;
  CHECK_OR_FAIL(out.sorted(), "rank %d: record %llu of its partition is out of order", me,
                static_cast<unsigned long long>(out.first_unordered));
  CHECK_OR_FAIL(foreign == 0, "rank %d: %zu records of other partitions", me, foreign);
  const size_t grew_kb = status_kb("VmHWM:") - base_kb;
  const shuffle::ShuffleStats& st = s.stats();
  std::printf("rank %d: %llu records out, %llu runs spilled, %llu spill reads served, peak +%zu kB\n",
              me, static_cast<unsigned long long>(out.records),
              static_cast<unsigned long long>(st.runs_spilled),
              static_cast<unsigned long long>(st.spill_requests_served), grew_kb);
  if (budget > 0) CHECK_OR_FAIL(st.runs_spilled > 0, "rank %d: nothing spilled", me);
  // Random keys: every rank's spill holds records of the others, which it served (pull: read
  // requests; push: the windows credited, written from the file).
  if (budget > 0 && keys == "random")
    CHECK_OR_FAIL(st.spill_requests_served > 0, "rank %d: no spill reads served", me);
  if (mem_bound_kb > 0)
    CHECK_OR_FAIL(grew_kb < mem_bound_kb, "rank %d: memory grew by %zu kB (bound %zu) for %llu records",
                  me, grew_kb, mem_bound_kb, static_cast<unsigned long long>(out.records));

  std::vector<uint8_t> mine(sizeof(Totals));
  std::memcpy(mine.data(), &t, sizeof(Totals));
  Totals all{};
  for (const auto& m : shuffle::all_gather(*fabric, mine, 1ull << 62)) {
    Totals r;
    std::memcpy(&r, m.data(), sizeof(Totals));
    all.in_records += r.in_records;
    all.out_records += r.out_records;
    all.in_sum += r.in_sum;
    all.out_sum += r.out_sum;
  }
  CHECK_OR_FAIL(all.in_records == all.out_records && all.in_sum == all.out_sum,
                "%llu records in, %llu out; checksums %s", static_cast<unsigned long long>(all.in_records),
                static_cast<unsigned long long>(all.out_records), all.in_sum == all.out_sum ? "equal" : "differ");
  std::printf("rank %d: spill sort ok\n", me);
  return 0;
}
ChildMode spill_sort_mode("spill_sort", spill_sort_child);

// Rank 1 dies in the middle of the merge (in its sink, its spill file half served): every
// other rank fails, naming it, instead of waiting or finishing with records missing.
int spill_dead_mapper_child() {
  auto fabric = rdma::Fabric::create(bootstrap_from_env(30s), {.name = "spill"});
  const int n = fabric->size(), me = fabric->rank();
  shuffle::ShuffleOptions o;
  o.mode = env_text("SHUFFLE_MODE", "pull") == "push" ? shuffle::ShuffleMode::kPush : shuffle::ShuffleMode::kPull;
  o.fetch_bytes = 16 * 1024;
  o.key_bytes = kKeyBytes;
  o.memory_bytes = 128 * 1024;
  shuffle::Shuffle s(*fabric, o);
  std::vector<uint8_t> buf(2000 * kRecordBytes);
  for (size_t first = 0; first < 20000; first += 2000) {
    make_chunk(me, first, 2000, "random", buf.data());
    s.map(buf.data(), 2000, [&](const uint8_t* r) { return r[0] * n / 256; });
  }
  try {
    s.exchange([&](const uint8_t*, size_t) {
      if (me == 1) {
        std::fflush(stdout);
        ::_exit(0);
      }
    });
    std::printf("FAIL: rank %d finished a shuffle whose rank 1 died\n", me);
    return 1;
  } catch (const Error& e) {
    std::printf("rank %d: %s\n", me, e.what());
    const std::string what = e.what();
    CHECK_OR_FAIL(what.find("mapper 1") != std::string::npos || what.find("rank 1 ") != std::string::npos,
                  "rank %d: the error does not name rank 1: %s", me, e.what());
  }
  return 0;
}
ChildMode spill_dead_mapper_mode("spill_dead_mapper", spill_dead_mapper_child);

struct SpillCase {
  std::string name;
  int ranks;
  std::map<std::string, std::string> env;
};
void PrintTo(const SpillCase& c, std::ostream* os) { *os << c.name; }

class SpillSort : public ::testing::TestWithParam<SpillCase> {};

TEST_P(SpillSort, EveryRankGetsItsRangeInKeyOrderAndNothingIsLost) {
  std::map<std::string, std::string> env = GetParam().env;
  env["PLAIT_TIMEOUT"] = "60000";
  JobResult r = run_job(GetParam().ranks, "spill_sort", env, 300);
  EXPECT_EQ(r.status, 0) << r.output;
  size_t ok = 0;
  for (size_t at = 0; (at = r.output.find("spill sort ok", at)) != std::string::npos; ++at) ++ok;
  EXPECT_EQ(ok, static_cast<size_t>(GetParam().ranks)) << r.output;
}

// 20000 records (2 MB) a rank in runs of 2000; a budget of 256 KiB spills most of them.
// Skew: 100000 records (10 MB) a rank, all to one or a few reducers, with 1 MiB of budget:
// the reducer of 40 MB must stay within a bound far below that. (The bound is on the peak
// resident size: under AddressSanitizer its quarantine of freed memory, which kept ~28 MB
// of the mappers' chunks, is off for these cases.)
// tests/CMakeLists.txt's ASAN_OPTIONS for sanitized runs, and no quarantine.
constexpr const char* kBoundedAsanOptions = "intercept_tls_get_addr=0:quarantine_size_mb=0";

INSTANTIATE_TEST_SUITE_P(
    Cases, SpillSort,
    ::testing::Values(
        SpillCase{"pull_shm_spilled", 3, {{"SPILL_BUDGET", "262144"}}},
        SpillCase{"pull_tcp_spilled", 4, {{"PLAIT_TRANSPORT", "tcp"}, {"SPILL_BUDGET", "262144"}}},
        SpillCase{"pull_shm_in_memory_runs", 3, {{"SPILL_SINK", "0"}}},
        SpillCase{"pull_shm_spilled_to_buffer", 3, {{"SPILL_SINK", "0"}, {"SPILL_BUDGET", "262144"}}},
        SpillCase{"push_tcp_in_memory_runs", 3, {{"PLAIT_TRANSPORT", "tcp"}, {"SHUFFLE_MODE", "push"}}},
        // Push within a budget: the mappers write each window the reducer gives a credit for,
        // from memory or from their spill files.
        SpillCase{"push_shm_spilled", 3, {{"SHUFFLE_MODE", "push"}, {"SPILL_BUDGET", "262144"}}},
        SpillCase{"push_tcp_spilled", 4,
                  {{"PLAIT_TRANSPORT", "tcp"}, {"SHUFFLE_MODE", "push"}, {"SPILL_BUDGET", "262144"}}},
        SpillCase{"push_shm_spilled_to_buffer", 3,
                  {{"SHUFFLE_MODE", "push"}, {"SPILL_SINK", "0"}, {"SPILL_BUDGET", "262144"}}},
        SpillCase{"push_one_key_bounded", 4,
                  {{"SHUFFLE_MODE", "push"}, {"SPILL_KEYS", "one"}, {"SPILL_RECORDS", "100000"},
                   {"SPILL_CHUNK", "5000"}, {"SPILL_BUDGET", "1048576"}, {"SPILL_MEM_BOUND_KB", "16384"},
                   {"ASAN_OPTIONS", kBoundedAsanOptions}}},
        SpillCase{"one_key_bounded", 4,
                  {{"SPILL_KEYS", "one"}, {"SPILL_RECORDS", "100000"}, {"SPILL_CHUNK", "5000"},
                   {"SPILL_BUDGET", "1048576"}, {"SPILL_MEM_BOUND_KB", "16384"},
                   {"ASAN_OPTIONS", kBoundedAsanOptions}}},
        SpillCase{"zipf_bounded", 4,
                  {{"SPILL_KEYS", "zipf"}, {"SPILL_RECORDS", "100000"}, {"SPILL_CHUNK", "5000"},
                   {"SPILL_BUDGET", "1048576"}, {"SPILL_MEM_BOUND_KB", "16384"},
                   {"ASAN_OPTIONS", kBoundedAsanOptions}}}),
    [](const auto& info) { return info.param.name; });

TEST(SpillSortFaults, AMapperDyingWhileItsSpillIsServedIsNamedByEveryOtherRank) {
  JobResult r = run_job(3, "spill_dead_mapper", {{"PLAIT_TRANSPORT", "tcp"}, {"PLAIT_TIMEOUT", "20000"}}, 120);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 2: "), std::string::npos) << r.output;
}

TEST(SpillSortFaults, AMapperDyingWhileItPushesIsNamedByEveryOtherRank) {
  JobResult r = run_job(3, "spill_dead_mapper",
                        {{"PLAIT_TRANSPORT", "tcp"}, {"PLAIT_TIMEOUT", "20000"}, {"SHUFFLE_MODE", "push"}}, 120);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 2: "), std::string::npos) << r.output;
}

TEST(SpillSortUsage, PushWithABudgetButNoKeyIsRefused) {
  // Checked without ranks: the options are refused before any communication.
  shuffle::ShuffleOptions o;
  o.mode = shuffle::ShuffleMode::kPush;
  o.memory_bytes = 1 << 20;
  auto fabric = rdma::Fabric::create(bootstrap_from_env(5s), {.name = "spill"});
  try {
    shuffle::Shuffle s(*fabric, o);
    ADD_FAILURE() << "a push shuffle with a memory budget and no key was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs key_bytes"), std::string::npos) << e.what();
  }
  o.key_bytes = 10;
  shuffle::Shuffle with_a_key(*fabric, o);  // merged through credited windows: accepted
}

}  // namespace
}  // namespace plait::testing
