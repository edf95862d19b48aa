// The stall inspector: a rank that skips a collective is named by every rank, long before
// the timeout, with what it is doing instead; and `plait run` prints the same on SIGUSR1.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
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

// A store that counts its calls, and hangs every call while the test says so.
class SwitchStore : public Store {
 public:
  explicit SwitchStore(std::shared_ptr<Store> base) : base_(std::move(base)) {}
  void set(const std::string& key, const Bytes& value) override {
    pass();
    base_->set(key, value);
  }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    pass();
    return base_->get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    pass();
    return base_->add(key, delta);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    pass();
    base_->wait(keys, timeout);
  }
  bool check(const std::string& key) override {
    pass();
    return base_->check(key);
  }
  using Store::set;

  int64_t calls() const { return calls_.load(); }
  void hang() {
    std::lock_guard lock(mu_);
    hung_ = true;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      hung_ = false;
    }
    cv_.notify_all();
  }

 private:
  void pass() {
    calls_.fetch_add(1);
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !hung_; });
  }
  std::shared_ptr<Store> base_;
  std::atomic<int64_t> calls_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool hung_ = false;
};

// This process's stderr through a pipe, passed on as it comes: says when a stall report
// line holding `needle` has been logged here.
class StderrWatch {
 public:
  explicit StderrWatch(std::string needle) : needle_(std::move(needle)) {
    int fds[2];
    if (::pipe(fds) != 0) std::abort();
    saved_ = ::dup(2);
    ::dup2(fds[1], 2);
    ::close(fds[1]);
    thread_ = std::thread([this, in = fds[0]] {
      char buf[4096];
      std::string text;
      for (ssize_t n; (n = ::read(in, buf, sizeof buf)) > 0;) {
        if (::write(saved_, buf, static_cast<size_t>(n)) < 0) break;
        text.append(buf, static_cast<size_t>(n));
        for (size_t end; (end = text.find('\n')) != std::string::npos; text.erase(0, end + 1)) {
          const std::string line = text.substr(0, end);
          if (line.find("stall report") == std::string::npos || line.find(needle_) == std::string::npos)
            continue;
          std::lock_guard lock(mu_);
          seen_ = true;
          cv_.notify_all();
        }
      }
      ::close(in);
    });
  }
  ~StderrWatch() {
    ::dup2(saved_, 2);  // the pipe's last writer goes: the thread reads its end
    thread_.join();
    ::close(saved_);
  }
  bool wait(std::chrono::seconds limit) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return seen_; });
  }

 private:
  const std::string needle_;
  int saved_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  bool seen_ = false;
  std::thread thread_;
};

// Two communicators, A and B, each over its own view of the job's store. While all is well
// neither view is called at all. Then A's store hangs (every call blocks) and both stall:
// ranks 0 and 1 wait in an allreduce on each while rank 2 waits for B's report. B's report
// must come while A's store still hangs. (The inspector once asked the store on every tick,
// one or two calls per communicator a second, from one thread for every communicator:
// A's hung store froze B's report until A's store came back.)
int hung_store_child() {
  const Bootstrap base = bootstrap_from_env(std::chrono::seconds(30));
  auto store_a = std::make_shared<SwitchStore>(base.store);
  auto store_b = std::make_shared<SwitchStore>(base.store);
  Bootstrap a = base, b = base;
  a.store = store_a;
  b.store = store_b;
  auto comm_a = Communicator::create(a, {.name = "a"});
  auto comm_b = Communicator::create(b, {.name = "b"});
  const int me = comm_a->rank();
  std::vector<float> va(5, 1.0f), vb(7, 1.0f);
  comm_a->barrier()->wait();
  comm_b->barrier()->wait();

  const int64_t calls_before = store_a->calls() + store_b->calls();
  // Busy for 2 s or more: as many collectives on every rank (a loop that each rank ended by
  // its own clock issued allreduce #192 against a barrier).
  for (int i = 0; i < 200; ++i) {
    comm_a->allreduce(va.data(), va.data(), va.size(), DataType::kF32, ReduceOp::kMax)->wait();
    comm_b->allreduce(vb.data(), vb.data(), vb.size(), DataType::kF32, ReduceOp::kMax)->wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));  // and idle
  std::printf("store calls while all was well: %lld\n",
              static_cast<long long>(store_a->calls() + store_b->calls() - calls_before));
  comm_a->barrier()->wait();
  comm_b->barrier()->wait();

  StderrWatch watch("count 7");
  store_a->hang();
  std::thread in_a;
  WorkPtr in_b;
  if (me != 2) {
    in_a = std::thread([&] { comm_a->allreduce(va.data(), va.data(), va.size(), DataType::kF32, ReduceOp::kMax)->wait(); });
    in_b = comm_b->allreduce(vb.data(), vb.data(), vb.size(), DataType::kF32, ReduceOp::kMax);
  }
  const bool reported = watch.wait(std::chrono::seconds(20));
  std::printf("B's report %s while A's store hung\n", reported ? "came" : "did not come");
  std::fflush(stdout);
  store_a->release();
  if (me == 2) {
    comm_a->allreduce(va.data(), va.data(), va.size(), DataType::kF32, ReduceOp::kMax)->wait();
    comm_b->allreduce(vb.data(), vb.data(), vb.size(), DataType::kF32, ReduceOp::kMax)->wait();
  } else {
    in_a.join();
    in_b->wait();
  }
  return 0;
}
ChildMode hung_store("stall_hung_store", hung_store_child);

TEST(StallInspector, OneCommunicatorsHungStoreDelaysNoOtherReportAndAllIsWellCostsNoStoreCall) {
  auto results = spawn_ranks(3, {0, 1, 2}, "stall_hung_store", [&](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "60000"}, {"PLAIT_STALL_WARN", "1000"}};
  });
  for (const auto& r : results) {
    std::printf("rank %d: %s\n", r.rank, report_line(r.output).c_str());
    EXPECT_EQ(r.status, 0) << "rank " << r.rank << ": " << r.output;
    EXPECT_NE(r.output.find("store calls while all was well: 0\n"), std::string::npos)
        << "rank " << r.rank << ": " << r.output;
    EXPECT_NE(r.output.find("B's report came while A's store hung"), std::string::npos)
        << "rank " << r.rank << ": " << r.output;
    const std::string line = report_line(r.output);
    EXPECT_NE(line.find("(count 7, f32, max) has waited"), std::string::npos) << "rank " << r.rank << ": " << r.output;
    EXPECT_NE(line.find("on ranks 0, 1; rank 2 has not called it: rank 2 is in no collective"), std::string::npos)
        << "rank " << r.rank << ": " << r.output;
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
