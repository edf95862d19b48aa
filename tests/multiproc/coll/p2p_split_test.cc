// Point-to-point semantics (ordering, any-source, receives posted before sends, large
// messages) and communicator split, on real ranks.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <numeric>
#include <vector>

#include "plait/plait.h"
#include "support/job.h"

namespace plait::testing {
namespace {

#define CHECK_OR_FAIL(cond, ...)            \
  do {                                      \
    if (!(cond)) {                          \
      std::printf("FAIL: " __VA_ARGS__);    \
      std::printf("\n");                    \
      return 1;                             \
    }                                       \
  } while (0)

// Two simulated hosts when PLAIT_TEST_HOSTS is set: any-source receives then span the shm
// and tcp providers (a composite fabric posts them on both).
void simulate_hosts() {
  if (const char* hosts = std::getenv("PLAIT_TEST_HOSTS")) {
    const char* rank = std::getenv("RANK");
    std::string id = "h" + std::to_string(std::atoi(rank ? rank : "0") % std::atoi(hosts));
    ::setenv("PLAIT_HOST_ID", id.c_str(), 1);
  }
}

int p2p_child() {
  simulate_hosts();
  auto comm = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  const int n = comm->size(), me = comm->rank();
  const int right = (me + 1) % n, left = (me + n - 1) % n;

  // Receives posted before sends (batch_isend_irecv order), several per tag, in order.
  std::vector<int32_t> got(5, -1);
  std::vector<WorkPtr> recvs;
  for (int i = 0; i < 5; ++i) recvs.push_back(comm->recv(&got[i], 1, DataType::kI32, left, 3));
  std::vector<int32_t> sent(5);
  std::vector<WorkPtr> sends;
  for (int i = 0; i < 5; ++i) {
    sent[i] = me * 100 + i;
    sends.push_back(comm->send(&sent[i], 1, DataType::kI32, right, 3));
  }
  for (auto& w : recvs) w->wait();
  for (auto& w : sends) w->wait();
  for (int i = 0; i < 5; ++i)
    CHECK_OR_FAIL(got[i] == left * 100 + i, "message %d from %d: got %d", i, left, got[i]);

  // Different tags match by tag, not by arrival.
  int32_t a = -1, b = -1, x = me, y = me + 1000;
  auto wb = comm->recv(&b, 1, DataType::kI32, left, 11);
  auto wa = comm->recv(&a, 1, DataType::kI32, left, 10);
  comm->send(&y, 1, DataType::kI32, right, 11)->wait();
  comm->send(&x, 1, DataType::kI32, right, 10)->wait();
  wa->wait();
  wb->wait();
  CHECK_OR_FAIL(a == left && b == left + 1000, "tags: a=%d b=%d", a, b);

  // Any-source: rank 0 hears from everyone and learns who sent what.
  if (me == 0) {
    std::vector<int> seen(n, 0);
    for (int i = 1; i < n; ++i) {
      int32_t v = -1;
      auto w = comm->recv(&v, 1, DataType::kI32, kAnySource, 20);
      w->wait();
      CHECK_OR_FAIL(w->source() == v && v > 0 && v < n, "any-source: source %d value %d", w->source(), v);
      CHECK_OR_FAIL(w->bytes() == 4, "any-source: %zu bytes", w->bytes());
      seen[v]++;
    }
    for (int r = 1; r < n; ++r) CHECK_OR_FAIL(seen[r] == 1, "rank %d seen %d times", r, seen[r]);
  } else {
    int32_t v = me;
    comm->send(&v, 1, DataType::kI32, 0, 20)->wait();
  }

  // A large message (rendezvous, striped) lands intact. Timed (CallOptions::timed): each end
  // says when it was posted and when it finished, within the calls.
  std::vector<uint8_t> big((8 << 20) + 5), in(big.size());
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + me);
  const auto posted = std::chrono::steady_clock::now();
  auto wr = comm->recv(in.data(), in.size(), DataType::kU8, left, 30, {.timed = true});
  auto ws = comm->send(big.data(), big.size(), DataType::kU8, right, 30, {.timed = true});
  ws->wait();
  wr->wait();
  const auto waited = std::chrono::steady_clock::now();
  for (size_t i = 0; i < in.size(); ++i)
    CHECK_OR_FAIL(in[i] == static_cast<uint8_t>(i * 7 + left), "big message byte %zu", i);
  for (const auto& w : {wr, ws}) {
    const WorkTimes t = w->times();
    CHECK_OR_FAIL(posted <= t.started && t.started <= t.finished && t.finished <= waited,
                  "times of a timed %s out of order", w == wr ? "recv" : "send");
  }

  // Collectives and point-to-point interleave on one communicator.
  int32_t sum = 1;
  comm->allreduce(&sum, &sum, 1, DataType::kI32, ReduceOp::kSum)->wait();
  CHECK_OR_FAIL(sum == n, "allreduce after p2p: %d", sum);

  // A timed collective over the collective segment (the engine starts it in the caller's
  // thread, past the run queue) is timed from its start, not only at its end.
  if (!std::getenv("PLAIT_TEST_HOSTS")) {
    int32_t one = 1;
    const auto before = std::chrono::steady_clock::now();
    auto timed = comm->allreduce(&one, &one, 1, DataType::kI32, ReduceOp::kSum,
                                 {.algorithm = "shm", .timed = true});
    timed->wait();
    const WorkTimes t = timed->times();
    CHECK_OR_FAIL(one == n, "shm allreduce: %d", one);
    CHECK_OR_FAIL(before <= t.started && t.started < t.finished,
                  "a timed shm allreduce: started %lld ns after the call, finished %lld ns after",
                  static_cast<long long>((t.started - before).count()),
                  static_cast<long long>((t.finished - before).count()));
  }
  std::printf("rank %d: p2p ok\n", me);
  return 0;
}
ChildMode p2p("p2p", p2p_child);

int split_child() {
  simulate_hosts();
  auto world = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  const int n = world->size(), me = world->rank();
  // Even and odd ranks, ordered by descending world rank inside each group.
  auto half = world->split(me % 2, -me);
  CHECK_OR_FAIL(half != nullptr, "split returned null");
  const int expect_size = (n + (me % 2 == 0 ? 1 : 0)) / 2;
  CHECK_OR_FAIL(half->size() == expect_size, "group size %d, want %d", half->size(), expect_size);
  int64_t v = me, total = 0;
  half->allreduce(&v, &total, 1, DataType::kI64, ReduceOp::kSum)->wait();
  int64_t want = 0;
  for (int r = me % 2; r < n; r += 2) want += r;
  CHECK_OR_FAIL(total == want, "group sum %ld, want %ld", long(total), long(want));
  // Rank order inside the group follows the key (descending world rank).
  int64_t first = 0;
  int64_t mine = me;
  half->broadcast(&mine, &first, 1, DataType::kI64, 0)->wait();
  int64_t highest = me % 2 == 0 ? ((n - 1) / 2) * 2 : ((n - 2) / 2) * 2 + 1;
  CHECK_OR_FAIL(first == highest, "group root is world rank %ld, want %ld", long(first), long(highest));
  // The world communicator still works alongside the split one.
  int32_t one = 1, count = 0;
  world->allreduce(&one, &count, 1, DataType::kI32, ReduceOp::kSum)->wait();
  CHECK_OR_FAIL(count == n, "world sum %d", count);
  // Ranks that opt out get no communicator; the others get a group of everyone else.
  auto rest = world->split(me == 0 ? kUndefinedColor : 1, me);
  CHECK_OR_FAIL((me == 0) == (rest == nullptr), "undefined color");
  if (rest) {
    CHECK_OR_FAIL(rest->size() == n - 1 && rest->rank() == me - 1, "rest rank %d/%d", rest->rank(), rest->size());
    rest->barrier()->wait();
  }
  // Subgroups are made by their members only: the odd ranks never call, the even ones make
  // two groups of the same list (distinct groups), in reverse rank order.
  if (me % 2 == 0) {
    std::vector<int> evens;
    for (int r = n - 1; r >= 0; --r)
      if (r % 2 == 0) evens.push_back(r);
    for (int round = 0; round < 2; ++round) {
      auto sub = world->subgroup(evens);
      CHECK_OR_FAIL(sub->size() == static_cast<int>(evens.size()), "subgroup size %d", sub->size());
      CHECK_OR_FAIL(evens[sub->rank()] == me, "subgroup rank %d", sub->rank());
      int64_t r0 = me, got = -1;
      sub->broadcast(&r0, &got, 1, DataType::kI64, 0)->wait();
      CHECK_OR_FAIL(got == evens[0], "subgroup root is %ld, want %d", long(got), evens[0]);
    }
  }
  // on_complete runs once, after the result is in place, whether registered before or after.
  {
    int32_t in = 1, out = 0;
    std::atomic<int> calls{0};
    std::atomic<int32_t> seen{-1};
    auto w = world->allreduce(&in, &out, 1, DataType::kI32, ReduceOp::kSum);
    w->on_complete([&] { seen = out; ++calls; });
    w->wait();
    w->on_complete([&] { ++calls; });
    // The first callback may still be running in the engine's thread when wait() returns.
    for (int i = 0; i < 10000 && calls < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK_OR_FAIL(calls == 2 && seen == n, "on_complete: %d calls, saw %d", calls.load(), seen.load());
  }
  // A second world communicator over the same store does not collide with the first.
  auto again = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  int32_t c2 = 0;
  again->allreduce(&one, &c2, 1, DataType::kI32, ReduceOp::kSum)->wait();
  CHECK_OR_FAIL(c2 == n, "second world sum %d", c2);
  std::printf("rank %d: split ok\n", me);
  return 0;
}
ChildMode split("split", split_child);

// Started the torchrun way, rank 0 hosting the store (MASTER_ADDR): the communicator keeps
// rank 0's server alive, so a split after the Bootstrap is gone still reaches it. (Rank 0's
// server once went with the Bootstrap, and every later split failed: "store ... closed the
// connection".)
int rank0_store_child() {
  ::unsetenv("PLAIT_STORE_ADDR");
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  auto world = Communicator::create(bootstrap_from_env(std::chrono::seconds(30)));
  const int me = world->rank(), n = world->size();
  std::this_thread::sleep_for(std::chrono::milliseconds(me == 0 ? 0 : 200));  // rank 0 first
  auto half = world->split(me % 2, me);
  int32_t one = 1, sum = 0;
  half->allreduce(&one, &sum, 1, DataType::kI32, ReduceOp::kSum)->wait();
  CHECK_OR_FAIL(sum == (n + 1 - me % 2) / 2, "rank %d: split sum %d", me, sum);
  world->barrier()->wait();
  std::printf("rank %d: split over rank 0's store ok\n", me);
  return 0;
}
ChildMode rank0_store("rank0_store", rank0_store_child);

// A store that answers every subgroup key with text that is not a communicator id (another
// job sharing the store, or a damaged one): the member that reads it gets an error naming
// the key, not a std::invalid_argument out of std::stoll.
class GarbledSubgroupStore : public Store {
 public:
  explicit GarbledSubgroupStore(std::shared_ptr<Store> base) : base_(std::move(base)) {}
  void set(const std::string& key, const Bytes& value) override { base_->set(key, value); }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    if (key.find("subgroup/") == std::string::npos) return base_->get(key, timeout);
    const std::string garbled = "abc";
    return Bytes(garbled.begin(), garbled.end());
  }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(key, delta); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    base_->wait(keys, timeout);
  }
  bool check(const std::string& key) override { return base_->check(key); }
  using Store::set;

 private:
  std::shared_ptr<Store> base_;
};

int garbled_subgroup_child() {
  Bootstrap b = bootstrap_from_env(std::chrono::seconds(30));
  b.store = std::make_shared<GarbledSubgroupStore>(b.store);
  auto world = Communicator::create(b);
  if (world->rank() == 1) {
    try {
      world->subgroup({0, 1});
      std::printf("FAIL: a subgroup from a garbled id\n");
      return 1;
    } catch (const Error& e) {
      std::printf("refused: %s [%s]\n", e.what(), std::string(to_string(e.category())).c_str());
    }
  }
  world->barrier()->wait();
  return 0;
}
ChildMode garbled_subgroup("garbled_subgroup", garbled_subgroup_child);

TEST(Split, AGarbledSubgroupIdInTheStoreIsAnErrorNamingTheKey) {
  auto results = spawn_ranks(2, {0, 1}, "garbled_subgroup", [](int) {
    return std::map<std::string, std::string>{{"PLAIT_TIMEOUT", "20000"}};
  });
  for (const auto& r : results) EXPECT_EQ(r.status, 0) << "rank " << r.rank << ": " << r.output;
  EXPECT_NE(results[1].output.find("the store holds 'abc' for subgroup key"), std::string::npos)
      << results[1].output;
}

int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(Split, WorksLongAfterBootstrapWhenRankZeroHostsTheStore) {
  const std::string port = std::to_string(unused_port());
  auto results = spawn_ranks(3, {0, 1, 2}, "rank0_store", [&](int) {
    return std::map<std::string, std::string>{{"PLAIT_STORE_PORT", port}, {"PLAIT_TIMEOUT", "60000"}};
  });
  for (const auto& r : results) EXPECT_EQ(r.status, 0) << "rank " << r.rank << ": " << r.output;
}

class PointToPoint : public ::testing::TestWithParam<int> {};

TEST_P(PointToPoint, OrderingAnySourceAndLargeMessages) {
  JobResult r = run_job(GetParam(), "p2p", {{"PLAIT_TIMEOUT", "60000"}}, 300);
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST_P(PointToPoint, SplitGroupsRunTheirOwnCollectives) {
  JobResult r = run_job(GetParam(), "split", {{"PLAIT_TIMEOUT", "60000"}}, 300);
  EXPECT_EQ(r.status, 0) << r.output;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, PointToPoint, ::testing::Values(2, 3, 5),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

// Ranks on two simulated hosts: each reaches some peers by shm and others by tcp.
TEST(PointToPointMixed, AnySourceAcrossProvidersAndSplit) {
  JobResult r = run_job(4, "p2p", {{"PLAIT_TIMEOUT", "60000"}, {"PLAIT_TEST_HOSTS", "2"}}, 300);
  EXPECT_EQ(r.status, 0) << r.output;
  r = run_job(5, "split", {{"PLAIT_TIMEOUT", "60000"}, {"PLAIT_TEST_HOSTS", "2"}}, 300);
  EXPECT_EQ(r.status, 0) << r.output;
}

}  // namespace
}  // namespace plait::testing
