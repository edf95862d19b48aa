// The deadline allreduce on real ranks: under random arrival delays every rank gets the same
// contributor set and the exact reduction over it; kCarry loses nothing; backup workers end
// a step without the slowest rank, which is reported; mismatched calls and bad options give
// clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "coll/deadline/aggregator.h"
#include "plait/deadline_allreduce.h"
#include "plait/plait.h"
#include "support/job.h"

namespace plait::testing {
namespace {

using deadline::DeadlineAllreduce;
using deadline::LatePolicy;
using deadline::Options;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// What rank r contributes to step s: integers, so sums are exact in any order.
int64_t value(int r, uint64_t s, size_t i) { return 1000 * (r + 1) + 10 * static_cast<int64_t>(s) + static_cast<int64_t>(i % 7); }

std::string mask_text(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += std::to_string(r) + ",";
  return s;
}

int deadline_child() {
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  const int me = comm->rank(), n = comm->size();
  Options o;
  o.deadline = std::chrono::milliseconds(env_int("DL_DEADLINE_MS", 20));
  o.late = env_int("DL_CARRY", 0) ? LatePolicy::kCarry : LatePolicy::kDrop;
  o.backup = env_int("DL_BACKUP", 0);
  o.root = env_int("DL_ROOT", 0);
  const int steps = env_int("DL_STEPS", 30);
  const int max_delay_ms = env_int("DL_MAX_DELAY_MS", 0);
  const int slow_rank = env_int("DL_SLOW_RANK", -1);
  const size_t count = static_cast<size_t>(env_int("DL_COUNT", 1000));
  std::mt19937 rng(static_cast<unsigned>(1234 + me));
  try {
    DeadlineAllreduce dl(*comm, o);
    std::vector<int64_t> buf(count);
    int64_t sent_total = 0, result_total = 0;
    int partial = 0;
    auto run_step = [&](uint64_t s, bool contribute, int delay_ms) {
      if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      for (size_t i = 0; i < count; ++i) buf[i] = contribute ? value(me, s, i) : 0;
      if (contribute) sent_total += buf[0];
      auto r = dl.allreduce(buf.data(), count, DataType::kI64, ReduceOp::kSum);
      result_total += buf[0];
      if (r.contributors.size() < static_cast<size_t>(n)) ++partial;
      // Without carrying, the result is exactly the sum over the contributors.
      if (o.late == LatePolicy::kDrop)
        for (size_t i = 0; i < count; ++i) {
          int64_t expect = 0;
          for (int c : r.contributors) expect += value(c, s, i);
          if (buf[i] != expect) {
            std::printf("BAD step %llu element %zu: %lld != %lld\n", static_cast<unsigned long long>(s),
                        i, static_cast<long long>(buf[i]), static_cast<long long>(expect));
            std::exit(4);
          }
        }
      std::printf("step %llu contributors %s result %lld slow %s\n",
                  static_cast<unsigned long long>(s), mask_text(r.contributors).c_str(),
                  static_cast<long long>(buf[count - 1]), mask_text(r.slow).c_str());
      return r;
    };
    uint64_t s = 0;
    for (; s < static_cast<uint64_t>(steps); ++s) {
      int delay = max_delay_ms > 0 ? static_cast<int>(rng() % static_cast<unsigned>(max_delay_ms)) : 0;
      if (me == slow_rank) delay = env_int("DL_SLOW_MS", 500);
      run_step(s, true, delay);
    }
    if (o.late == LatePolicy::kCarry) {
      // Flush: zero contributions until a step has everyone, so every carried value is in.
      for (;; ++s)
        if (run_step(s, false, 0).contributors.size() == static_cast<size_t>(n)) break;
      long long totals[2] = {sent_total, result_total}, all[2 * 64];
      comm->allgather(totals, all, 2, DataType::kI64)->wait();
      long long sent_all = 0;
      for (int r = 0; r < n; ++r) sent_all += all[2 * r];
      // Every rank's results add up to everything every rank sent: nothing was lost.
      std::printf("carry sent %lld received %lld\n", sent_all, static_cast<long long>(result_total));
    }
    std::printf("partial steps %d\n", partial);
  } catch (const Error& e) {
    std::printf("ERROR %s: %s\n", std::string(to_string(e.category())).c_str(), e.what());
    return 3;
  }
  std::printf("ok\n");
  return 0;
}
ChildMode deadline_mode("deadline", deadline_child);

std::vector<RankResult> run(int n, std::map<std::string, std::string> env) {
  env["PLAIT_TIMEOUT"] = "60000";
  return spawn_ranks(n, [n] {
    std::vector<int> all;
    for (int r = 0; r < n; ++r) all.push_back(r);
    return all;
  }(), "deadline", [&](int) { return env; });
}

// The "step ..." lines of a rank's output, which must be the same on every rank.
std::vector<std::string> step_lines(const std::string& out) {
  std::vector<std::string> lines;
  for (size_t at = 0; at < out.size();) {
    size_t end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    if (out.compare(at, 5, "step ") == 0) lines.push_back(out.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

TEST(DeadlineAllreduce, UnderRandomDelaysEveryRankAgreesAndTheSumIsExact) {
  for (const char* root : {"0", "2"}) {
    auto results = run(4, {{"DL_MAX_DELAY_MS", "40"}, {"DL_DEADLINE_MS", "15"}, {"DL_ROOT", root}});
    ASSERT_EQ(results.size(), 4u);
    for (const auto& r : results) ASSERT_EQ(r.status, 0) << r.output;
    const auto reference = step_lines(results[0].output);
    ASSERT_EQ(reference.size(), 30u) << results[0].output;
    for (const auto& r : results) EXPECT_EQ(step_lines(r.output), reference) << "rank " << r.rank;
  }
}

TEST(DeadlineAllreduce, WithoutStragglersEveryoneContributes) {
  auto results = run(3, {{"DL_DEADLINE_MS", "20000"}, {"DL_STEPS", "20"}, {"DL_COUNT", "100000"}});
  for (const auto& r : results) {
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("partial steps 0\n"), std::string::npos) << r.output;
  }
}

TEST(DeadlineAllreduce, CarryLosesNothing) {
  auto results = run(4, {{"DL_MAX_DELAY_MS", "40"}, {"DL_DEADLINE_MS", "10"}, {"DL_CARRY", "1"}});
  for (const auto& r : results) {
    ASSERT_EQ(r.status, 0) << r.output;
    size_t at = r.output.find("carry sent ");
    ASSERT_NE(at, std::string::npos) << r.output;
    long long sent = 0, received = 0;
    std::sscanf(r.output.c_str() + at, "carry sent %lld received %lld", &sent, &received);
    EXPECT_EQ(sent, received) << r.output;
  }
  // The delays made some steps go without someone, or the test tested nothing.
  EXPECT_EQ(results[0].output.find("partial steps 0\n"), std::string::npos) << results[0].output;
}

TEST(DeadlineAllreduce, BackupWorkersEndAStepWithoutTheSlowestWhichIsReported) {
  auto results = run(4, {{"DL_DEADLINE_MS", "60000"}, {"DL_BACKUP", "1"}, {"DL_SLOW_RANK", "3"},
                         {"DL_SLOW_MS", "400"}, {"DL_STEPS", "5"}});
  for (const auto& r : results) {
    ASSERT_EQ(r.status, 0) << r.output;
    // The 60 s deadline never came: each step ended when three had arrived.
    const auto lines = step_lines(r.output);
    ASSERT_EQ(lines.size(), 5u);
    EXPECT_NE(lines.back().find("contributors 0,1,2, "), std::string::npos) << r.output;
    EXPECT_NE(lines.back().find("slow 3,"), std::string::npos) << r.output;
  }
}

int mismatch_child() {
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  try {
    DeadlineAllreduce dl(*comm, Options{.deadline = std::chrono::seconds(5)});
    std::vector<float> buf(64, 1.0f);
    dl.allreduce(buf.data(), comm->rank() == 1 ? 32 : 64, DataType::kF32, ReduceOp::kSum);
  } catch (const Error& e) {
    std::printf("ERROR %s\n", e.what());
    return 3;
  }
  return 0;
}
ChildMode mismatch_mode("deadline_mismatch", mismatch_child);

TEST(DeadlineAllreduce, RanksThatPassDifferentCountsAllGetAnErrorNamingTheRank) {
  auto results = spawn_ranks(3, {0, 1, 2}, "deadline_mismatch", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "20000"}};
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 3) << r.output;
    EXPECT_NE(r.output.find("deadline allreduce step 0 differs across ranks: rank "), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("rank 1 passed 32 x f32 sum"), std::string::npos) << r.output;
  }
}

// Rank 2 joins every odd step without values: the mean is over the others, it is neither a
// contributor nor late, and the step still waits for no one (a 10 s deadline never comes).
int join_child() {
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  const int me = comm->rank();
  try {
    DeadlineAllreduce dl(*comm, Options{.deadline = std::chrono::seconds(10)});
    for (uint64_t s = 0; s < 6; ++s) {
      const bool join_only = me == 2 && s % 2 == 1;
      std::vector<double> v(50, me == 2 && join_only ? 1e9 : 10.0 * (me + 1) + s);
      auto r = dl.allreduce(v.data(), v.size(), DataType::kF64, ReduceOp::kAvg, 0, !join_only);
      const std::vector<int> expect_ranks = s % 2 == 1 ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2};
      double expect = 0;
      for (int c : expect_ranks) expect += 10.0 * (c + 1) + s;
      expect /= static_cast<double>(expect_ranks.size());
      if (r.contributors != expect_ranks || r.late || v[0] != expect || v[49] != expect) {
        std::printf("BAD step %llu: %s late %d value %g expected %g\n", static_cast<unsigned long long>(s),
                    mask_text(r.contributors).c_str(), r.late, v[0], expect);
        return 4;
      }
    }
  } catch (const Error& e) {
    std::printf("ERROR %s\n", e.what());
    return 3;
  }
  std::printf("ok\n");
  return 0;
}
ChildMode join_mode("deadline_join", join_child);

TEST(DeadlineAllreduce, ARankThatJoinsWithoutValuesIsLeftOutOfTheMean) {
  auto results = spawn_ranks(3, {0, 1, 2}, "deadline_join", nullptr);
  for (const auto& r : results) EXPECT_EQ(r.status, 0) << r.output;
}

// Semi-reliable: 32 MiB per rank in 512 KiB chunks over TCP with a 2 ms deadline, so chunks
// are still on the way when steps are decided. Rank r contributes 2^r everywhere, so each
// chunk's sum names the ranks in it: every element of a chunk must agree, their number must
// be the chunk's contributor count, and with DL_MAX_DROPPED=0 every chunk of everyone.
int chunks_child() {
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  const int me = comm->rank(), n = comm->size();
  const double max_dropped = std::atof(std::getenv("DL_MAX_DROPPED"));
  try {
    DeadlineAllreduce dl(*comm, Options{.deadline = std::chrono::milliseconds(2),
                                        .chunk_bytes = 512 << 10, .max_dropped = max_dropped});
    const size_t count = 4 << 20;  // 32 MiB of i64
    const size_t per_chunk = (512 << 10) / 8;
    std::vector<int64_t> v(count);
    std::mt19937 rng(static_cast<unsigned>(77 + me));
    double dropped = 0;
    int partial = 0;  // steps where some rank's chunks were only partly in
    for (uint64_t s = 0; s < 8; ++s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 3));
      std::fill(v.begin(), v.end(), int64_t{1} << me);
      auto r = dl.allreduce(v.data(), count, DataType::kI64, ReduceOp::kSum);
      if (r.chunk_contributors.size() != count / per_chunk) return 5;
      std::string sig;
      for (size_t c = 0; c < r.chunk_contributors.size(); ++c) {
        const int64_t first = v[c * per_chunk];
        for (size_t i = c * per_chunk; i < (c + 1) * per_chunk; ++i)
          if (v[i] != first) {
            std::printf("BAD step %llu chunk %zu is not uniform\n", static_cast<unsigned long long>(s), c);
            return 4;
          }
        if (__builtin_popcountll(static_cast<uint64_t>(first)) != r.chunk_contributors[c]) {
          std::printf("BAD step %llu chunk %zu: sum %lld but %d contributors\n",
                      static_cast<unsigned long long>(s), c, static_cast<long long>(first),
                      r.chunk_contributors[c]);
          return 4;
        }
        sig += std::to_string(first) + ",";
      }
      for (int c : r.chunk_contributors)
        if (c != r.chunk_contributors.front()) {
          ++partial;
          break;
        }
      if (max_dropped == 0 && (r.dropped_fraction != 0 || r.contributors.size() != static_cast<size_t>(n))) {
        std::printf("BAD step %llu dropped %g with max_dropped 0\n", static_cast<unsigned long long>(s),
                    r.dropped_fraction);
        return 4;
      }
      dropped += r.dropped_fraction;
      std::printf("step %llu chunk sums %s dropped %.6f\n", static_cast<unsigned long long>(s),
                  sig.c_str(), r.dropped_fraction);
    }
    std::printf("mean dropped %.4f, %d steps with a rank's chunks partly in\n", dropped / 8, partial);
  } catch (const Error& e) {
    std::printf("ERROR %s\n", e.what());
    return 3;
  }
  std::printf("ok\n");
  return 0;
}
ChildMode chunks_mode("deadline_chunks", chunks_child);

TEST(DeadlineAllreduce, ChunksThatMissTheDeadlineAreLeftOutChunkByChunkAlikeOnEveryRank) {
  for (const char* max_dropped : {"1", "0"}) {
    auto results = spawn_ranks(3, {0, 1, 2}, "deadline_chunks", [&](int) {
      return std::map<std::string, std::string>{
          {"PLAIT_TIMEOUT", "60000"}, {"PLAIT_TRANSPORT", "tcp"}, {"DL_MAX_DROPPED", max_dropped}};
    });
    ASSERT_EQ(results.size(), 3u);
    for (const auto& r : results) ASSERT_EQ(r.status, 0) << "max_dropped " << max_dropped << ": " << r.output;
    const auto reference = step_lines(results[0].output);
    ASSERT_EQ(reference.size(), 8u);
    for (const auto& r : results) EXPECT_EQ(step_lines(r.output), reference) << "rank " << r.rank;
    const size_t at = results[0].output.find("mean dropped");
    std::printf("max_dropped %s: %s\n", max_dropped,
                results[0].output.substr(at, results[0].output.find('\n', at) - at).c_str());
  }
}

// The root closes as soon as it has its result, while the others' late contributions are
// still arriving: closing must drain them, not wait out its timeout. (The aggregator once
// took the queued arrivals and threw them away when the request to stop came in the same
// wake-up; the close then waited its 10 s and said the headers were missing.)
int close_child() {
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  const int me = comm->rank();
  std::mt19937 rng(static_cast<unsigned>(77 + me));
  try {
    std::vector<float> buf(256, 1.0f);
    for (int round = 0; round < env_int("DL_ROUNDS", 30); ++round) {
      DeadlineAllreduce dl(*comm, Options{.deadline = std::chrono::milliseconds(1)});
      for (int s = 0; s < 3; ++s) {
        if (me != 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
        dl.allreduce(buf.data(), buf.size(), DataType::kF32, ReduceOp::kAvg);
      }
    }
  } catch (const Error& e) {
    std::printf("ERROR %s\n", e.what());
    return 3;
  }
  std::printf("ok\n");
  return 0;
}
ChildMode close_mode("deadline_close", close_child);

TEST(DeadlineAllreduce, ClosingRightAfterTheResultDrainsTheLateContributions) {
  auto results = spawn_ranks(3, {0, 1, 2}, "deadline_close", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "60000"}};
  });
  for (const auto& r : results) {
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output.find("closed after the timeout"), std::string::npos) << r.output;
  }
}

// A straggler that then dies: rank 2 misses step 0's deadline, and while ranks 0 and 1 wait
// after step 1 it exits without a word. Its failed receives reach the root's aggregator for
// steps already decided without it. (Handling the first freed the step it was handling:
// heap-use-after-free under ASan, a double free without.)
int straggler_dies_child() {
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  const int me = comm->rank();
  try {
    DeadlineAllreduce dl(*comm, Options{.deadline = std::chrono::milliseconds(30)});
    if (me == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::fflush(stdout);
      ::_exit(0);
    }
    std::vector<float> buf(1000);
    for (uint64_t s = 0; s < 2; ++s) {
      std::fill(buf.begin(), buf.end(), static_cast<float>(me + 1));
      const deadline::StepResult r = dl.allreduce(buf.data(), buf.size(), DataType::kF32, ReduceOp::kSum);
      if (r.contributors != std::vector<int>{0, 1} || buf[0] != 3.0f || buf[999] != 3.0f) {
        std::printf("FAIL: step %llu contributors %s values %g\n", static_cast<unsigned long long>(s),
                    mask_text(r.contributors).c_str(), static_cast<double>(buf[0]));
        return 1;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(800));  // rank 2 is gone by now
  } catch (const Error& e) {
    std::printf("ERROR %s\n", e.what());
    return 3;
  }
  std::printf("ok\n");
  return 0;
}
ChildMode straggler_dies_mode("deadline_straggler_dies", straggler_dies_child);

TEST(DeadlineAllreduce, AStragglerThatDiesAfterItsStepsWereDecidedIsDroppedSafely) {
  auto results = spawn_ranks(3, {0, 1, 2}, "deadline_straggler_dies", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "20000"}};
  });
  for (const auto& r : results) EXPECT_EQ(r.status, 0) << "rank " << r.rank << ": " << r.output;
  EXPECT_NE(results[0].output.find("ok"), std::string::npos) << results[0].output;
  EXPECT_NE(results[1].output.find("ok"), std::string::npos) << results[1].output;
}

// The root's aggregator goes while others still hold its communicators (as the
// DeadlineAllreduce itself did, for a moment, when it closed): its receive for the next
// step's headers must be cancelled before that step's buffers are freed. Rank 1 sends a
// header for it after the aggregator is gone. (It landed in freed memory: heap-use-after-free
// under ASan.)
int aggregator_gone_child() {
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  const int me = comm->rank();
  auto contributions = comm->split(0, me);
  auto results = comm->split(0, me);
  if (me == 0) {
    auto aggregator = std::make_unique<deadline::Aggregator>(
        contributions, results, Options{.deadline = std::chrono::milliseconds(30)});
    aggregator.reset();
  }
  comm->barrier()->wait();
  if (me == 1) {
    deadline::wire::ContributionHeader h;
    h.step = 0;
    h.count = 0;
    try {
      contributions->send(&h, sizeof h, DataType::kU8, 0, deadline::wire::tag(0, 0))->wait();
    } catch (const Error& e) {
      std::printf("send: %s\n", e.what());  // the closed aggregator may refuse it
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the header has landed
  comm->barrier()->wait();
  std::printf("ok\n");
  return 0;
}
ChildMode aggregator_gone_mode("deadline_aggregator_gone", aggregator_gone_child);

TEST(DeadlineAllreduce, AnAggregatorThatGoesCancelsItsReceivesFirst) {
  auto results = spawn_ranks(2, {0, 1}, "deadline_aggregator_gone", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "20000"}};
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 0) << "rank " << r.rank << ": " << r.output;
    EXPECT_NE(r.output.find("ok"), std::string::npos) << r.output;
  }
}

// A rank's header claims 2^50 f32 values (4 PiB): the root cannot hold them. Its aggregator
// fails the step with an error every rank hears, before it allocates anything. (It let
// std::bad_alloc end the process from its thread: status 134.)
int aggregator_huge_child() {
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  const int me = comm->rank();
  auto contributions = comm->split(0, me);
  auto results = comm->split(0, me);
  std::unique_ptr<deadline::Aggregator> aggregator;
  if (me == 0)
    aggregator = std::make_unique<deadline::Aggregator>(contributions, results,
                                                        Options{.deadline = std::chrono::milliseconds(30)});
  comm->barrier()->wait();
  if (me == 1) {
    deadline::wire::ContributionHeader h;
    h.step = 0;
    h.count = uint64_t{1} << 50;
    h.dtype = static_cast<uint8_t>(DataType::kF32);
    h.op = static_cast<uint8_t>(ReduceOp::kSum);
    contributions->send(&h, sizeof h, DataType::kU8, 0, deadline::wire::tag(0, 0))->wait();
  }
  comm->barrier()->wait();
  if (me == 0) {
    try {
      aggregator->take_result(0, std::chrono::seconds(10));
      std::printf("FAIL: step 0 was decided\n");
      return 1;
    } catch (const Error& e) {
      std::printf("refused: %s\n", e.what());
    }
  }
  std::printf("ok\n");
  return 0;
}
ChildMode aggregator_huge_mode("deadline_aggregator_huge", aggregator_huge_child);

TEST(DeadlineAllreduce, AContributionTooLargeToHoldFailsTheStepAndNotTheProcess) {
  auto results = spawn_ranks(2, {0, 1}, "deadline_aggregator_huge", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "20000"}};
  });
  for (const auto& r : results) EXPECT_EQ(r.status, 0) << "rank " << r.rank << ": " << r.output;
  EXPECT_NE(results[0].output.find("rank 1's contribution to step 0 holds 4503599627370496 bytes, more than "
                                   "this host's memory"),
            std::string::npos)
      << results[0].output;
}

int bad_options_child() {
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  int refused = 0;
  for (Options o : {Options{}, Options{.deadline = std::chrono::milliseconds(1), .min_contributors = 0},
                    Options{.deadline = std::chrono::milliseconds(1), .backup = 2},
                    Options{.deadline = std::chrono::milliseconds(1), .root = 5}}) {
    try {
      DeadlineAllreduce dl(*comm, o);
    } catch (const Error& e) {
      if (e.category() == ErrorCategory::kInvalidUsage) ++refused;
      std::printf("refused: %s\n", e.what());
    }
  }
  return refused == 4 ? 0 : 1;
}
ChildMode bad_options_mode("deadline_bad_options", bad_options_child);

TEST(DeadlineAllreduce, BadOptionsAreRefusedBeforeAnythingStarts) {
  auto results = spawn_ranks(2, {0, 1}, "deadline_bad_options", nullptr);
  for (const auto& r : results) {
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("the deadline must be more than 0"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace plait::testing
