// The parameter server's ASP and SSP on real ranks, with a deliberately slow worker: the
// versions pulls return stay within the bound, and the values end exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "support/job.h"
#include "support/ps_ranks.h"

namespace plait::testing {
namespace {

// Every worker's pushes of key 1 (kSum: in ASP and SSP each push is added to the value):
// the total after `steps` of every worker.
double total_after(int workers, int steps, size_t i) {
  double t = 0;
  for (int w = 0; w < workers; ++w)
    for (int step = 1; step <= steps; ++step) t += grad(w, step, i);
  return t;
}

// ASP and SSP: worker 0 is slow (it sleeps before each push). A pull at clock c returns a
// version v <= c, and under SSP v >= c - s: no worker runs more than s clocks ahead of the
// slowest. The values hold at least every worker's first v pushes. After a barrier of the
// workers, a pull returns the exact total.
int stale_child(Consistency mode) {
  const int staleness = env_int("PS_STALENESS", 0);
  auto bootstrap = bootstrap_from_env(30s);
  auto comm = Communicator::create(bootstrap, {.name = "test"});
  ps::Options o;
  o.servers = env_int("PS_SERVERS", 1);
  o.consistency = mode;
  o.staleness = staleness;
  auto kv = KVStore::create(bootstrap, o);
  const size_t n = 4096;
  kv->register_key(1, n, DataType::kF32, {.update = {.rule = Rule::kSum}});
  if (kv->is_server()) {
    kv->finalize();
    return 0;
  }
  const int W = kv->num_workers(), me = kv->worker_index();
  std::vector<int> worker_ranks;
  for (int r = 0; r < comm->size(); ++r)
    if (r < W) worker_ranks.push_back(r);  // servers are the last ranks
  auto workers = comm->subgroup(worker_ranks);
  const int steps = 12;
  std::vector<float> g(n), out(n);
  uint64_t widest_gap = 0;
  for (int step = 1; step <= steps; ++step) {
    if (me == 0) std::this_thread::sleep_for(15ms);
    for (size_t i = 0; i < n; ++i) g[i] = grad(me, step, i);
    auto wk = kv->push_pull(1, g.data(), out.data(), n, DataType::kF32);
    wk->wait();
    const uint64_t v = wk->version(), c = static_cast<uint64_t>(step);
    CHECK_OR_FAIL(v <= c, "step %d: version %llu ahead of this worker's clock", step,
                  static_cast<unsigned long long>(v));
    if (mode == Consistency::kSsp)
      CHECK_OR_FAIL(v + staleness >= c, "step %d: version %llu, more than %d behind clock %llu", step,
                    static_cast<unsigned long long>(v), staleness, static_cast<unsigned long long>(c));
    widest_gap = std::max(widest_gap, c - v);
    for (size_t i = 0; i < n; i += 511)
      CHECK_OR_FAIL(out[i] >= total_after(W, static_cast<int>(v), i),
                    "step %d element %zu: %g lacks pushes of version %llu", step, i, out[i],
                    static_cast<unsigned long long>(v));
  }
  workers->barrier()->wait();
  auto wk = kv->pull(1, out.data(), n, DataType::kF32);
  wk->wait();
  CHECK_OR_FAIL(wk->version() == static_cast<uint64_t>(steps), "final version %llu",
                static_cast<unsigned long long>(wk->version()));
  for (size_t i = 0; i < n; ++i)
    CHECK_OR_FAIL(out[i] == total_after(W, steps, i), "final element %zu: %g, want %g", i, out[i],
                  total_after(W, steps, i));
  kv->finalize();
  std::printf("worker %d: ps %s ok (widest gap between its clock and the version: %llu)\n", me,
              std::string(ps::to_string(mode)).c_str(), static_cast<unsigned long long>(widest_gap));
  return 0;
}

ChildMode ssp_mode("ps_ssp", [] { return stale_child(Consistency::kSsp); });
ChildMode asp_mode("ps_asp", [] { return stale_child(Consistency::kAsp); });

TEST(PsStale, SspKeepsEveryWorkerWithinTheBoundOfTheSlowest) {
  for (int s : {1, 4}) {
    JobResult r = run_job(4, "ps_ssp", {{"PLAIT_TIMEOUT", "60000"}, {"PS_STALENESS", std::to_string(s)}}, 300);
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(count_of(r.output, "ps ssp ok"), 3u) << r.output;
  }
}

TEST(PsStale, AspAppliesEveryPushAndEndsExact) {
  JobResult r = run_job(5, "ps_asp", {{"PLAIT_TIMEOUT", "60000"}, {"PS_SERVERS", "2"}}, 300);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "ps asp ok"), 3u) << r.output;
}

// SSP (staleness 1) after a worker finished: worker 2 does two clocks and finalizes; worker 0
// pulls at clock 3 (it needs every worker at clock 2) while worker 1 is still at clock 1.
// The pull waits for worker 1, not for the finished worker 2, whose two pushes are enough.
// (The server once counted a finished worker's SSP pushes as 0 and failed such a pull as
// "can never be answered".)
int ssp_finished_child() {
  auto bootstrap = bootstrap_from_env(30s);
  auto comm = Communicator::create(bootstrap, {.name = "test"});
  ps::Options o;
  o.servers = 1;
  o.consistency = Consistency::kSsp;
  o.staleness = 1;
  auto kv = KVStore::create(bootstrap, o);
  const size_t n = 256;
  kv->register_key(1, n, DataType::kF32, {.update = {.rule = Rule::kSum}});
  if (kv->is_server()) {
    kv->finalize();
    return 0;
  }
  const int me = kv->worker_index();
  auto workers = comm->subgroup({0, 1, 2});  // the server is the last rank
  std::vector<float> g(n, 1.0f), out(n);
  auto step = [&] {
    auto wk = kv->push_pull(1, g.data(), out.data(), n, DataType::kF32);
    wk->wait();
    return wk->version();
  };
  step();                                           // clock 1, everyone
  if (me != 1) step();                              // clock 2: workers 0 and 2
  workers->barrier()->wait();
  if (me == 2) {
    kv->finalize();                                 // done after two clocks
  } else if (me == 0) {
    std::this_thread::sleep_for(300ms);             // worker 2's Done is in
    const uint64_t v = step();                      // clock 3: waits for worker 1's clock 2
    std::printf("worker 0: clock 3 answered at version %llu\n", static_cast<unsigned long long>(v));
  } else {
    std::this_thread::sleep_for(1000ms);            // the pull above waits, health checks run
    step();
    step();
  }
  if (me != 2) kv->finalize();
  std::printf("worker %d: ps ssp finished ok\n", me);
  return 0;
}
ChildMode ssp_finished_mode("ps_ssp_finished", ssp_finished_child);

TEST(PsStale, SspPullWaitsForTheSlowWorkerNotForOneThatFinished) {
  JobResult r = run_job(4, "ps_ssp_finished", {{"PLAIT_TIMEOUT", "60000"}}, 120);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "ps ssp finished ok"), 3u) << r.output;
  EXPECT_EQ(count_of(r.output, "clock 3 answered at version 2"), 1u) << r.output;
}

// A BSP job with one backup worker: 4 workers, 1 server, key 1 of 1,024 f32 kept as each
// round's sum. Worker w pushes 2^w, so a value names whose pushes it holds. On the server
// the job is over when this returns (me < 0).
struct BackupJob {
  std::shared_ptr<Communicator> comm, workers;
  std::shared_ptr<KVStore> kv;
  int me = -1;
  std::vector<float> g, out;

  // A push_pull at `clock`, as "version V value X at clock C".
  std::string step(int clock) {
    auto wk = kv->push_pull(1, g.data(), out.data(), out.size(), DataType::kF32);
    wk->wait();
    for (size_t i = 1; i < out.size(); ++i)
      if (out[i] != out[0]) return std::string("values differ");
    return "version " + std::to_string(wk->version()) + " value " + std::to_string(static_cast<int>(out[0])) +
           " at clock " + std::to_string(clock);
  }
};

BackupJob backup_job(bool fold_late) {
  auto bootstrap = bootstrap_from_env(30s);
  BackupJob job;
  job.comm = Communicator::create(bootstrap, {.name = "test"});
  ps::Options o;
  o.servers = 1;
  o.backup_workers = 1;
  o.fold_late = fold_late;
  job.kv = KVStore::create(bootstrap, o);
  const size_t n = 1024;
  job.kv->register_key(1, n, DataType::kF32, {.update = {.rule = Rule::kSum}});
  if (job.kv->is_server()) {
    job.kv->finalize();
    return job;
  }
  job.me = job.kv->worker_index();
  job.workers = job.comm->subgroup({0, 1, 2, 3});  // servers are the last ranks
  job.g.assign(n, static_cast<float>(1 << job.me));
  job.out.assign(n, 0.0f);
  return job;
}

// Round 1 is applied with workers 0-2 alone (worker 3 waits at a barrier). Then worker 3
// pushes its round-1 gradient, late: dropped, or with fold_late added to round 2, which
// workers 0-2 then apply with it: 7 + 8 = 15. Rounds 3-4 go without worker 3 again.
int backup_child() {
  BackupJob job = backup_job(env_int("PS_FOLD", 0) != 0);
  if (job.me < 0) return 0;
  if (job.me < 3) {
    std::printf("%s\n", job.step(1).c_str());
    job.workers->barrier()->wait();  // round 1 applied: worker 3 pushes now, late
    job.workers->barrier()->wait();  // its late push is in
    for (int clock = 2; clock <= 4; ++clock) std::printf("%s\n", job.step(clock).c_str());
  } else {
    job.workers->barrier()->wait();
    std::printf("late %s\n", job.step(1).c_str());
    job.workers->barrier()->wait();
  }
  job.kv->finalize();
  std::printf("worker %d: ps backup ok\n", job.me);
  return 0;
}
ChildMode backup_mode("ps_backup", backup_child);

TEST(PsBackup, ARoundIsAppliedWithTheFirstWorkersAndTheLateOneDroppedOrFolded) {
  for (const char* fold : {"0", "1"}) {
    JobResult r = run_job(5, "ps_backup", {{"PLAIT_TIMEOUT", "60000"}, {"PS_FOLD", fold}}, 300);
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(count_of(r.output, "ps backup ok"), 4u) << r.output;
    const bool folded = std::string(fold) == "1";
    EXPECT_EQ(count_of(r.output, "] version 1 value 7 at clock 1"), 3u) << r.output;
    EXPECT_EQ(count_of(r.output, folded ? "version 2 value 15 at clock 2" : "version 2 value 7 at clock 2"), 3u)
        << r.output;
    EXPECT_EQ(count_of(r.output, "version 4 value 7 at clock 4"), 3u) << r.output;
    // The late worker's pull at clock 1 is answered at once, with what round 1 or later holds.
    EXPECT_EQ(count_of(r.output, "late version "), 1u) << r.output;
  }
}

// BSP with one backup worker, rounds run ahead of the slow worker: workers 0-2 finish rounds
// 1-3 without worker 3, which then pushes its first gradient (late, dropped) and pulls at
// clock 1. The parameters it gets are round 3's, so its version is 3: more than its own
// clock. (The version was rebuilt from the immediate's low 32 bits as at most the worker's
// clock: 1 - (2^32 - 2) wrapped to about 1.8e19.)
int backup_ahead_child() {
  BackupJob job = backup_job(false);
  if (job.me < 0) return 0;
  if (job.me < 3)
    for (int clock = 1; clock <= 3; ++clock) std::printf("%s\n", job.step(clock).c_str());
  job.workers->barrier()->wait();  // rounds 1-3 applied
  if (job.me == 3) std::printf("late %s\n", job.step(1).c_str());
  job.kv->finalize();
  std::printf("worker %d: ps backup ahead ok\n", job.me);
  return 0;
}
ChildMode backup_ahead_mode("ps_backup_ahead", backup_ahead_child);

TEST(PsBackup, APullBehindTheRoundsSaysTheVersionItGot) {
  JobResult r = run_job(5, "ps_backup_ahead", {{"PLAIT_TIMEOUT", "60000"}}, 300);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "ps backup ahead ok"), 4u) << r.output;
  EXPECT_EQ(count_of(r.output, "] version 3 value 7 at clock 3"), 3u) << r.output;
  EXPECT_EQ(count_of(r.output, "late version 3 value 7 at clock 1"), 1u) << r.output;
}

int backup_bad_child() {
  auto bootstrap = bootstrap_from_env(30s);
  try {
    ps::Options o;
    o.servers = 1;
    o.backup_workers = 2;  // two workers: at most one backup
    KVStore::create(bootstrap, o);
  } catch (const Error& e) {
    std::printf("refused: %s\n", e.what());
    return e.category() == ErrorCategory::kInvalidUsage ? 0 : 1;
  }
  return 1;
}
ChildMode backup_bad_mode("ps_backup_bad", backup_bad_child);

TEST(PsBackup, AsManyBackupsAsWorkersAreRefused) {
  JobResult r = run_job(3, "ps_backup_bad", {{"PLAIT_TIMEOUT", "20000"}}, 120);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("backup_workers 2 (0 up to one less than the 2 workers"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace plait::testing
