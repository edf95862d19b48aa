// The shm provider with ranks as threads of this process, each with its own Fabric and its
// own segment, sharing one in-process store. Cross-memory attach works within one process
// too (a process may read and write itself), so both the CMA paths and the copy fallback
// (PLAIT_SHM_CMA=off) run here; tests/multiproc/shm_fabric_fault_test.cc covers processes.
#include <dirent.h>
#include <sys/uio.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <thread>

#include "core/clock.h"
#include "plait/store.h"
#include "transport/fabric.h"
#include "transport/memory_registry.h"
#include "transport/shm/segment.h"

namespace plait::transport {
namespace {

using namespace std::chrono_literals;

// Whether this process may use process_vm_readv at all (a seccomp profile may forbid it).
bool cma_available() {
  static const bool ok = [] {
    uint64_t src = 42, dst = 0;
    iovec l{&dst, 8}, r{&src, 8};
    return ::process_vm_readv(::getpid(), &l, 1, &r, 1, 0) == 8 && dst == 42;
  }();
  return ok;
}

Config test_config(const std::string& cma = "auto") {
  Config c;
  c.connect_timeout = 10s;
  c.timeout = 10s;
  c.shm_cma = cma;
  return c;
}

FabricOptions options_for(int rank, int size, std::shared_ptr<Store> store, const Config& config,
                          const std::string& token = "job-secret",
                          const std::string& name = "shm-test") {
  FabricOptions o;
  o.rank = rank;
  o.size = size;
  o.store = std::move(store);
  o.name = name;
  o.job_token = token;
  o.config = config;
  return o;
}

// Creates `size` fabrics concurrently (creation blocks until every rank is attached).
std::vector<std::unique_ptr<Fabric>> make_fabrics(
    int size, const Config& config,
    const std::function<void(FabricOptions&)>& adjust = [](FabricOptions&) {}) {
  auto store = make_hash_store();
  std::vector<std::unique_ptr<Fabric>> fabrics(size);
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        FabricOptions o = options_for(r, size, store, config);
        adjust(o);
        fabrics[r] = create_shm_fabric(o);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return fabrics;
}

Completion wait_one(CompletionQueue& cq) {
  Completion c;
  EXPECT_TRUE(cq.wait(&c, 20s)) << "no completion within 20 s";
  return c;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 11));
  return v;
}

std::string format(uint64_t key) { return format_key(key); }

// A fabric name of this process alone, for tests that look into /dev/shm (ctest runs test
// cases of this binary side by side).
std::string unique_name(const std::string& base) { return base + "-" + std::to_string(::getpid()); }

// Entries of /dev/shm that belong to the job (token, name) of these tests.
std::vector<std::string> job_segments(const std::string& token, const std::string& name) {
  std::string prefix = shm::segment_name(token, name, 0);  // "/plait-<job>-0-<nonce>"
  prefix = prefix.substr(1, prefix.find('-', 7) - 1 + 1);   // "plait-<job>-"
  std::vector<std::string> found;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(e->d_name);
    ::closedir(d);
  }
  return found;
}

// Two ranks and a completion queue each; parameterized by PLAIT_SHM_CMA.
class ShmPair : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "on" && !cma_available()) GTEST_SKIP() << "no cross-memory attach here";
    start(test_config(GetParam()));
  }
  // Fabrics go first: a completion may still be on its way into a queue.
  void TearDown() override {
    f_.clear();
    cqs_.clear();
  }
  void start(const Config& config) {
    TearDown();
    f_ = make_fabrics(2, config);
    for (auto& f : f_) cqs_.push_back(f->create_cq());
  }
  Fabric& f(int r) { return *f_[r]; }
  CompletionQueue& cq(int r) { return *cqs_[r]; }
  size_t threshold() { return f(0).cost_model().eager_threshold; }

  // Sends `data` 0 -> 1 and checks what arrives, with the recv posted first or after the
  // message is known to have arrived unexpected.
  void round_trip(const std::vector<uint8_t>& data, bool recv_first) {
    std::vector<uint8_t> out(data.size() + 16, 0xee);
    auto post_recv = [&] { f(1).recv(0, out.data(), out.size(), 77, &cq(1), 2); };
    if (recv_first) post_recv();
    f(0).send(1, data.data(), data.size(), 77, 0xabcdef0123ull, &cq(0), 1);
    if (!recv_first) {
      // A later message on the same ring, received first: the one before it has then been
      // taken in, unexpected (rings deliver in order).
      uint64_t marker = 5, got = 0;
      f(0).send(1, &marker, 8, 78, 0, &cq(0), 9);
      f(1).recv(0, &got, 8, 78, &cq(1), 9);
      Completion m = wait_one(cq(1));
      ASSERT_TRUE(m.ok()) << m.error->what();
      ASSERT_EQ(m.context, 9u);
      post_recv();
    }
    Completion r = wait_one(cq(1));
    ASSERT_TRUE(r.ok()) << r.error->what();
    EXPECT_EQ(r.op, OpType::kRecv);
    EXPECT_EQ(r.context, 2u);
    EXPECT_EQ(r.peer, 0);
    EXPECT_EQ(r.tag, 77u);
    EXPECT_EQ(r.bytes, data.size());
    EXPECT_EQ(r.header, 0xabcdef0123ull);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin())) << data.size() << " bytes";
    EXPECT_EQ(out[data.size()], 0xee) << "wrote past the message";
    for (int i = 0; i < (recv_first ? 1 : 2); ++i) {
      Completion s = wait_one(cq(0));
      ASSERT_TRUE(s.ok()) << s.error->what();
      EXPECT_EQ(s.op, OpType::kSend);
      if (s.context == 1) EXPECT_EQ(s.bytes, data.size());
    }
  }

  std::vector<std::unique_ptr<Fabric>> f_;
  std::vector<std::unique_ptr<CompletionQueue>> cqs_;
};

INSTANTIATE_TEST_SUITE_P(Cma, ShmPair, ::testing::Values("on", "off"));

TEST_P(ShmPair, CapabilitiesAndCostModel) {
  EXPECT_EQ(f(0).capabilities().provider, "shm");
  EXPECT_GE(threshold(), 4u * 1024);
  EXPECT_LE(threshold(), 64u * 1024);
  EXPECT_EQ(f(1).rank(), 1);
  EXPECT_EQ(f(1).size(), 2);
  EXPECT_FALSE(f(0).peer_failed(1));
  bool listed = false;
  for (const Capabilities& c : provider_capabilities(Config{})) listed |= c.provider == "shm";
  EXPECT_TRUE(listed);
}

TEST_P(ShmPair, SendRecvSizesWithRecvPostedFirst) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, threshold() - 1, threshold(),
                   size_t{(1 << 20) + 3}, size_t{16 << 20}})
    round_trip(pattern(n, static_cast<uint8_t>(n)), /*recv_first=*/true);
}

TEST_P(ShmPair, UnexpectedEagerAndRendezvousMessages) {
  for (size_t n : {size_t{0}, size_t{100}, threshold() - 1, threshold(), size_t{3 << 20}})
    round_trip(pattern(n, 3), /*recv_first=*/false);
}

TEST_P(ShmPair, SixtyFourMebibytes) {
  round_trip(pattern(64 << 20, 1), /*recv_first=*/true);
}

TEST_P(ShmPair, EveryWaitPolicyWorks) {
  for (WaitPolicy policy : {WaitPolicy::kSpin, WaitPolicy::kHybrid, WaitPolicy::kBlock}) {
    Config config = test_config(GetParam());
    config.wait_policy = policy;
    start(config);
    round_trip(pattern(100, 1), true);
    round_trip(pattern(threshold(), 2), false);
    round_trip(pattern(2 << 20, 3), true);
  }
}

TEST_P(ShmPair, EagerThresholdFromConfigOverridesTheModel) {
  Config config = test_config(GetParam());
  config.eager_threshold = 100 << 10;
  start(config);
  EXPECT_EQ(threshold(), size_t{100} << 10);
  round_trip(pattern(99 << 10, 4), false);  // eager now, however large
  round_trip(pattern(100 << 10, 5), true);
}

TEST_P(ShmPair, ManyMessagesOfOneTagMatchInSendOrder) {
  // Alternating eager and rendezvous sizes, more than the ring holds: matching order must
  // still be send order.
  constexpr int kCount = 200;
  const size_t big = threshold() + 5;
  std::vector<std::vector<uint8_t>> in(kCount), out(kCount);
  for (int i = 0; i < kCount; ++i) {
    in[i] = pattern(i % 2 ? big : threshold() - 1 - i, static_cast<uint8_t>(i));
    out[i].resize(big);
  }
  for (int i = 0; i < kCount; ++i) f(0).send(1, in[i].data(), in[i].size(), 5, i, &cq(0), i);
  for (int i = 0; i < kCount; ++i) f(1).recv(0, out[i].data(), big, 5, &cq(1), i);
  for (int i = 0; i < kCount; ++i) {
    Completion c = wait_one(cq(1));
    ASSERT_TRUE(c.ok()) << c.error->what();
    EXPECT_EQ(c.header, c.context) << "message " << c.header << " matched recv " << c.context;
    EXPECT_EQ(c.bytes, in[c.context].size());
    EXPECT_TRUE(std::equal(in[c.context].begin(), in[c.context].end(), out[c.context].begin()));
  }
  for (int i = 0; i < kCount; ++i) EXPECT_TRUE(wait_one(cq(0)).ok());
}

TEST_P(ShmPair, AFullRingQueuesAndDeliversEverything) {
  // Nobody receives until the sender has sent far more than the ring holds.
  constexpr int kCount = 600;
  const size_t n = threshold() - 1;
  std::vector<std::vector<uint8_t>> in(kCount);
  for (int i = 0; i < kCount; ++i) {
    in[i] = pattern(n, static_cast<uint8_t>(i));
    f(0).send(1, in[i].data(), n, 6, i, &cq(0), i);
  }
  std::vector<uint8_t> out(n);
  for (int i = 0; i < kCount; ++i) {
    f(1).recv(0, out.data(), n, 6, &cq(1), i);
    Completion c = wait_one(cq(1));
    ASSERT_TRUE(c.ok()) << c.error->what();
    ASSERT_EQ(c.header, static_cast<uint64_t>(i));
    ASSERT_EQ(out, in[i]);
  }
  for (int i = 0; i < kCount; ++i) EXPECT_TRUE(wait_one(cq(0)).ok());
}

TEST_P(ShmPair, TagsMatchOutOfOrder) {
  uint64_t a = 111, b = 222, got_a = 0, got_b = 0;
  f(0).send(1, &a, 8, /*tag=*/1, 0, &cq(0), 0);
  f(0).send(1, &b, 8, /*tag=*/2, 0, &cq(0), 0);
  f(1).recv(0, &got_b, 8, 2, &cq(1), 2);
  EXPECT_EQ(wait_one(cq(1)).context, 2u);
  f(1).recv(0, &got_a, 8, 1, &cq(1), 1);
  EXPECT_EQ(wait_one(cq(1)).context, 1u);
  EXPECT_EQ(got_a, 111u);
  EXPECT_EQ(got_b, 222u);
}

TEST_P(ShmPair, TruncationFailsTheRecvAndKeepsThePairUsable) {
  for (size_t n : {size_t{100}, threshold() * 2}) {
    auto data = pattern(n, 1);
    std::vector<uint8_t> small(60, 0);
    f(1).recv(0, small.data(), 50, 9, &cq(1), 0);
    f(0).send(1, data.data(), data.size(), 9, 0, &cq(0), 0);
    Completion r = wait_one(cq(1));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error->category(), ErrorCategory::kInvalidUsage);
    EXPECT_NE(r.error->message().find(std::to_string(n) + " bytes"), std::string::npos)
        << r.error->what();
    EXPECT_NE(r.error->message().find("50 bytes"), std::string::npos) << r.error->what();
    EXPECT_TRUE(std::all_of(small.begin(), small.end(), [](uint8_t b) { return b == 0; }));
    EXPECT_TRUE(wait_one(cq(0)).ok());
    round_trip(pattern(1000, 2), true);  // the pair still works
  }
}

TEST_P(ShmPair, InvalidArgumentsThrowAtTheCall) {
  char buf[8];
  EXPECT_THROW(f(0).send(5, buf, 8, 0, 0, &cq(0), 0), Error);
  EXPECT_THROW(f(0).send(0, buf, 8, 0, 0, &cq(0), 0), Error);  // self
  EXPECT_THROW(f(0).send(1, nullptr, 8, 0, 0, &cq(0), 0), Error);
  EXPECT_THROW(f(0).recv(1, buf, 8, 0, nullptr, 0), Error);
  EXPECT_THROW(f(0).recv(-5, buf, 8, 0, &cq(0), 0), Error);
  EXPECT_THROW(f(0).write(1, nullptr, 8, RemoteKey{}, 0, std::nullopt, &cq(0), 0), Error);
  EXPECT_THROW(f(0).fetch_add(1, nullptr, RemoteKey{}, 0, 1, &cq(0), 0), Error);
}

TEST(ShmFabric, AnySourceReceivesFromEveryPeer) {
  auto f = make_fabrics(3, test_config());
  auto cq0 = f[0]->create_cq(), cq1 = f[1]->create_cq(), cq2 = f[2]->create_cq();
  uint64_t from1 = 1, from2 = 2, got[2] = {0, 0};
  f[0]->recv(kAnySource, &got[0], 8, 4, cq0.get(), 0);
  f[0]->recv(kAnySource, &got[1], 8, 4, cq0.get(), 1);
  f[1]->send(0, &from1, 8, 4, 0, cq1.get(), 0);
  f[2]->send(0, &from2, 8, 4, 0, cq2.get(), 0);
  std::set<int> peers;
  for (int i = 0; i < 2; ++i) {
    Completion c = wait_one(*cq0);
    ASSERT_TRUE(c.ok());
    peers.insert(c.peer);
    EXPECT_EQ(got[c.context], static_cast<uint64_t>(c.peer));
  }
  EXPECT_EQ(peers, (std::set<int>{1, 2}));
  EXPECT_TRUE(wait_one(*cq1).ok());
  EXPECT_TRUE(wait_one(*cq2).ok());
}

TEST(ShmFabric, FourRanksAllToAllBothPaths) {
  constexpr int kSize = 4;
  for (const char* cma : {"auto", "off"}) {
    auto f = make_fabrics(kSize, test_config(cma));
    std::vector<std::unique_ptr<CompletionQueue>> cq;
    for (auto& fab : f) cq.push_back(fab->create_cq());
    const size_t n = 200 * 1024;  // rendezvous
    std::vector<std::vector<uint8_t>> src(kSize), dst(kSize * kSize);
    for (int r = 0; r < kSize; ++r) src[r] = pattern(n, static_cast<uint8_t>(r));
    for (int r = 0; r < kSize; ++r)
      for (int p = 0; p < kSize; ++p) {
        if (p == r) continue;
        dst[r * kSize + p].resize(n);
        f[r]->recv(p, dst[r * kSize + p].data(), n, 0, cq[r].get(), p);
        f[p]->send(r, src[p].data(), n, 0, 0, cq[p].get(), 100 + r);
      }
    for (int r = 0; r < kSize; ++r)
      for (int i = 0; i < 2 * (kSize - 1); ++i) ASSERT_TRUE(wait_one(*cq[r]).ok());
    for (int r = 0; r < kSize; ++r)
      for (int p = 0; p < kSize; ++p)
        if (p != r) {
          EXPECT_EQ(dst[r * kSize + p], src[p]) << r << " from " << p << " (cma " << cma << ")";
        }
    f.clear();
  }
}

TEST(ShmFabric, SingleRankJobHasNobodyToReceiveFrom) {
  auto f = make_fabrics(1, test_config());
  auto cq = f[0]->create_cq();
  char buf[8];
  f[0]->recv(kAnySource, buf, sizeof buf, 0, cq.get(), 0);
  Completion c = wait_one(*cq);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error->category(), ErrorCategory::kRemote);
}

// A composite fabric hands each provider its ranks and one registry for all of them: here
// ranks 0 and 1 share a "host" of a 3-rank job, and rank 2 (alone) has no shm provider.
TEST(ShmFabric, ServesOnlyItsPeersAndSharesTheRegistry) {
  auto store = make_hash_store();
  std::vector<std::shared_ptr<MemoryRegistry>> registries(2);
  std::vector<std::unique_ptr<Fabric>> f(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      FabricOptions o = options_for(r, 3, store, test_config());
      registries[r] = o.registry = std::make_shared<MemoryRegistry>();
      o.peers = {1 - r};
      f[r] = create_shm_fabric(o);
    });
  for (auto& t : threads) t.join();
  ASSERT_TRUE(f[0] && f[1]);
  auto cq0 = f[0]->create_cq(), cq1 = f[1]->create_cq();
  char buf[8] = {};
  EXPECT_THROW(f[0]->send(2, buf, 8, 0, 0, cq0.get(), 0), Error);
  try {
    f[1]->recv(2, buf, 8, 0, cq1.get(), 0);
    ADD_FAILURE() << "recv from a rank outside the peer set was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    EXPECT_NE(e.message().find("not served"), std::string::npos) << e.what();
  }
  // A region registered through the shared registry (not through the fabric) is reachable.
  std::vector<uint64_t> mem(4, 0);
  RegionRef region = registries[1]->add(mem.data(), 32, kAccessAll);
  RemoteKey rk{reinterpret_cast<uint64_t>(mem.data()), 32, region->key()};
  uint64_t v = 0x1234;
  f[0]->write(1, &v, 8, rk, 8, std::nullopt, cq0.get(), 0);
  Completion c = wait_one(*cq0);
  ASSERT_TRUE(c.ok()) << c.error->what();
  EXPECT_EQ(mem[1], 0x1234u);
  registries[1]->remove(region->key());
  f[0]->write(1, &v, 8, rk, 0, std::nullopt, cq0.get(), 0);
  c = wait_one(*cq0);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error->message().find("is not registered"), std::string::npos) << c.error->what();
  EXPECT_EQ(mem[0], 0u);
  // Two messages both ways, any source: only the served peer can be the source.
  f[1]->recv(kAnySource, buf, 8, 3, cq1.get(), 0);
  f[0]->send(1, &v, 8, 3, 0, cq0.get(), 0);
  c = wait_one(*cq1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.peer, 0);
  EXPECT_TRUE(wait_one(*cq0).ok());
}

// --- one-sided ---

class ShmRma : public ShmPair {
 protected:
  void SetUp() override {
    ShmPair::SetUp();
    if (IsSkipped()) return;
    target_.assign(kRegion, 0);
    region_ = f(1).register_memory(target_.data(), kRegion, kAccessAll);
    rk_ = region_->remote_key();
    imm_cq_ = f(1).create_cq();
    f(1).set_imm_cq(imm_cq_.get());
  }
  void TearDown() override {
    region_.reset();
    ShmPair::TearDown();  // before imm_cq_, which rank 1 delivers into
  }
  Completion done() { return wait_one(cq(0)); }
  void expect_denied(const Completion& c, const std::string& fragment) {
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error->category(), ErrorCategory::kInvalidUsage);
    EXPECT_NE(c.error->message().find("remote access denied by rank 1: "), std::string::npos)
        << c.error->what();
    EXPECT_NE(c.error->message().find(fragment), std::string::npos) << c.error->what();
  }
  bool target_untouched() {
    return std::all_of(target_.begin(), target_.end(), [](uint8_t b) { return b == 0; });
  }

  static constexpr size_t kRegion = 6 << 20;
  std::vector<uint8_t> target_;
  std::unique_ptr<MemoryRegion> region_;
  RemoteKey rk_;
  std::unique_ptr<CompletionQueue> imm_cq_;
};

INSTANTIATE_TEST_SUITE_P(Cma, ShmRma, ::testing::Values("on", "off"));

TEST_P(ShmRma, WriteAndReadSmallAndLarge) {
  for (size_t n : {size_t{1}, size_t{4096}, size_t{(5 << 20) + 3}}) {
    auto data = pattern(n, static_cast<uint8_t>(n));
    f(0).write(1, data.data(), n, rk_, 17, std::nullopt, &cq(0), 5);
    Completion w = done();
    ASSERT_TRUE(w.ok()) << w.error->what();
    EXPECT_EQ(w.op, OpType::kWrite);
    EXPECT_EQ(w.bytes, n);
    EXPECT_EQ(w.context, 5u);
    // Completion means the target applied it: the bytes are there now.
    EXPECT_TRUE(std::equal(data.begin(), data.end(), target_.begin() + 17));
    std::vector<uint8_t> back(n);
    f(0).read(1, back.data(), n, rk_, 17, &cq(0), 6);
    Completion r = done();
    ASSERT_TRUE(r.ok()) << r.error->what();
    EXPECT_EQ(r.op, OpType::kRead);
    EXPECT_EQ(r.bytes, n);
    EXPECT_EQ(back, data);
  }
}

TEST_P(ShmRma, WriteWithImmediateNotifiesTheTargetAfterTheData) {
  for (size_t n : {size_t{0}, size_t{64}, size_t{(3 << 20) + 1}}) {
    auto data = pattern(n, 4);
    f(0).write(1, data.data(), n, rk_, 128, 0xfeed0000u + static_cast<uint32_t>(n), &cq(0), 0);
    Completion imm = wait_one(*imm_cq_);
    ASSERT_TRUE(imm.ok());
    EXPECT_EQ(imm.op, OpType::kRemoteWriteImm);
    EXPECT_EQ(imm.imm, 0xfeed0000u + n);
    EXPECT_EQ(imm.peer, 0);
    EXPECT_EQ(imm.bytes, n);
    EXPECT_EQ(imm.offset, 128u);
    EXPECT_EQ(imm.key, rk_.key);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), target_.begin() + 128));
    EXPECT_TRUE(done().ok());
  }
}

TEST_P(ShmRma, AtomicsApplyOnTheTarget) {
  uint64_t* word = reinterpret_cast<uint64_t*>(target_.data() + 64);
  *word = 10;
  uint64_t old = 0;
  f(0).fetch_add(1, &old, rk_, 64, 5, &cq(0), 1);
  Completion c = done();
  ASSERT_TRUE(c.ok()) << c.error->what();
  EXPECT_EQ(c.op, OpType::kFetchAdd);
  EXPECT_EQ(c.bytes, 8u);
  EXPECT_EQ(old, 10u);
  EXPECT_EQ(*word, 15u);
  f(0).compare_swap(1, &old, rk_, 64, 15, 100, &cq(0), 2);
  ASSERT_TRUE(done().ok());
  EXPECT_EQ(old, 15u);
  EXPECT_EQ(*word, 100u);
  f(0).compare_swap(1, &old, rk_, 64, 15, 200, &cq(0), 3);  // expected does not match
  ASSERT_TRUE(done().ok());
  EXPECT_EQ(old, 100u);
  EXPECT_EQ(*word, 100u);
}

TEST_P(ShmRma, ConcurrentFetchAddsFromTwoInitiatorsAndTheOwnerAllLand) {
  auto f3 = make_fabrics(3, test_config(GetParam()));
  std::vector<uint64_t> counter(1, 0);
  auto region = f3[0]->register_memory(counter.data(), 8, kAccessRemoteAtomic);
  auto cq1 = f3[1]->create_cq(), cq2 = f3[2]->create_cq();
  std::vector<uint64_t> olds(400);
  for (int i = 0; i < 200; ++i) {
    f3[1]->fetch_add(0, &olds[i], region->remote_key(), 0, 1, cq1.get(), i);
    f3[2]->fetch_add(0, &olds[200 + i], region->remote_key(), 0, 1, cq2.get(), i);
    __atomic_fetch_add(&counter[0], uint64_t{1} << 32, __ATOMIC_SEQ_CST);  // the owner's own
  }
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(wait_one(*cq1).ok());
    ASSERT_TRUE(wait_one(*cq2).ok());
  }
  EXPECT_EQ(counter[0], (uint64_t{200} << 32) + 400u);
  for (auto& o : olds) o &= 0xffffffffu;
  std::sort(olds.begin(), olds.end());
  for (uint64_t i = 0; i < 400; ++i) EXPECT_EQ(olds[i], i);
}

TEST_P(ShmRma, OutOfBoundsIsDeniedAndLeavesMemoryUntouched) {
  auto data = pattern(64, 1);
  f(0).write(1, data.data(), 64, rk_, kRegion - 32, 7u, &cq(0), 0);
  expect_denied(done(), "key " + format(rk_.key) + " offset " + std::to_string(kRegion - 32) +
                            " + 64 bytes exceeds region of " + std::to_string(kRegion) + " bytes");
  // A large write that runs off the end: nothing of it lands.
  std::vector<uint8_t> big(2 << 20, 0xab);
  f(0).write(1, big.data(), big.size(), rk_, kRegion - (1 << 20), std::nullopt, &cq(0), 0);
  expect_denied(done(), "exceeds region");
  std::vector<uint8_t> back(64);
  f(0).read(1, back.data(), 64, rk_, kRegion, &cq(0), 0);
  expect_denied(done(), "exceeds region");
  uint64_t old;
  f(0).fetch_add(1, &old, rk_, kRegion, 1, &cq(0), 0);
  expect_denied(done(), "exceeds region");
  f(0).write(1, data.data(), 64, rk_, ~uint64_t{0} - 10, std::nullopt, &cq(0), 0);
  expect_denied(done(), "exceeds region");  // no wrap-around into bounds
  Completion imm;
  EXPECT_FALSE(imm_cq_->poll(&imm));  // no immediate for a refused write
  if (GetParam() == "on") {
    // Checked by the initiator before the copy: nothing at all was written.
    EXPECT_TRUE(target_untouched());
  } else {
    // Piece by piece on the target, like tcp: refused pieces are not applied.
    EXPECT_TRUE(std::all_of(target_.begin(), target_.begin() + (kRegion - (1 << 20)),
                            [](uint8_t b) { return b == 0; }));
  }
  f(0).write(1, data.data(), 64, rk_, 0, std::nullopt, &cq(0), 0);  // still in sync
  ASSERT_TRUE(done().ok());
}

TEST_P(ShmRma, BadKeyAccessFlagsAlignmentAndDeregistration) {
  auto data = pattern(16, 1);
  RemoteKey bad = rk_;
  bad.key ^= 0x5555;
  f(0).write(1, data.data(), 16, bad, 0, std::nullopt, &cq(0), 0);
  expect_denied(done(), "is not registered");

  std::vector<uint64_t> ro(8, 3);
  auto read_only = f(1).register_memory(ro.data(), 64, kAccessRemoteRead);
  f(0).write(1, data.data(), 16, read_only->remote_key(), 0, std::nullopt, &cq(0), 0);
  expect_denied(done(), "does not allow remote write");
  uint64_t old = 0;
  f(0).fetch_add(1, &old, read_only->remote_key(), 0, 1, &cq(0), 0);
  expect_denied(done(), "does not allow remote atomic");
  EXPECT_EQ(ro[0], 3u);
  auto write_only = f(1).register_memory(ro.data(), 64, kAccessRemoteWrite);
  std::vector<uint8_t> back(8, 0);
  f(0).read(1, back.data(), 8, write_only->remote_key(), 0, &cq(0), 0);
  expect_denied(done(), "does not allow remote read");
  f(0).fetch_add(1, &old, rk_, 4, 1, &cq(0), 0);
  expect_denied(done(), "not 8-byte aligned");

  RemoteKey gone = read_only->remote_key();
  read_only.reset();
  f(0).read(1, back.data(), 8, gone, 0, &cq(0), 0);
  expect_denied(done(), "is not registered");
  EXPECT_TRUE(target_untouched());
  EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0; }));
}

TEST_P(ShmRma, DeregistrationWhileWritesLandIsSafe) {
  std::vector<uint8_t> mem(4 << 20, 0);
  auto region = f(1).register_memory(mem.data(), mem.size(), kAccessRemoteWrite);
  const RemoteKey rk = region->remote_key();
  auto data = pattern(1 << 20, 3);
  std::atomic<bool> stop{false};
  std::atomic<int> issued{0};
  // Small (inside the call) and large (chunked) writes, from another thread, until told.
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      size_t n = i % 2 ? data.size() : 4096;
      f(0).write(1, data.data(), n, rk, (i % 3) * data.size(), std::nullopt, &cq(0), i);
      issued.fetch_add(1);
    }
  });
  int first_ok = 0;
  while (first_ok < 4) {  // some writes landed before the deregistration
    Completion c = done();
    ASSERT_TRUE(c.ok()) << c.error->what();
    ++first_ok;
  }
  region.reset();  // while writes land
  std::fill(mem.begin(), mem.end(), 0x77);  // from now on no write may touch this memory
  stop.store(true);
  writer.join();
  for (int i = first_ok; i < issued.load(); ++i) {
    Completion c = done();
    if (!c.ok()) {
      EXPECT_EQ(c.error->category(), ErrorCategory::kInvalidUsage) << c.error->what();
    }
  }
  EXPECT_TRUE(std::all_of(mem.begin(), mem.end(), [](uint8_t b) { return b == 0x77; }));
}

TEST_P(ShmRma, ZeroLengthOpsSucceed) {
  f(0).write(1, nullptr, 0, rk_, kRegion, std::nullopt, &cq(0), 0);
  EXPECT_TRUE(done().ok());
  f(0).read(1, nullptr, 0, rk_, 0, &cq(0), 0);
  EXPECT_TRUE(done().ok());
}

TEST_P(ShmRma, MoreRegionsThanTheTableHoldsStayReachable) {
  // Past the shared table's capacity, regions are served by the target's progress engine.
  std::vector<uint64_t> words(1500, 0);
  std::vector<std::unique_ptr<MemoryRegion>> regions;
  for (auto& w : words) regions.push_back(f(1).register_memory(&w, 8, kAccessAll));
  for (size_t i : {size_t{0}, size_t{700}, size_t{1499}}) {
    uint64_t v = i + 1;
    f(0).write(1, &v, 8, regions[i]->remote_key(), 0, std::nullopt, &cq(0), i);
    ASSERT_TRUE(done().ok());
    EXPECT_EQ(words[i], i + 1);
  }
}

// --- cancel ---

TEST_P(ShmPair, CancelAbortsPostedRecvsAndLeavesBuffersAlone) {
  auto other = f(1).create_cq();
  std::vector<uint8_t> cancelled(4 << 20, 0x11);
  f(1).recv(0, cancelled.data(), 100, 3, &cq(1), 1);
  f(1).recv(0, cancelled.data() + 1000, cancelled.size() - 1000, 4, &cq(1), 2);
  f(1).cancel(&cq(1));
  for (int i = 0; i < 2; ++i) {
    Completion c = wait_one(cq(1));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error->category(), ErrorCategory::kAborted);
  }
  // The messages now meet fresh receives on another queue; the old buffers stay untouched.
  auto small = pattern(100, 5), big = pattern(3 << 20, 6);
  std::vector<uint8_t> got_small(100), got_big(3 << 20);
  f(0).send(1, small.data(), small.size(), 3, 0, &cq(0), 0);
  f(0).send(1, big.data(), big.size(), 4, 0, &cq(0), 0);
  f(1).recv(0, got_small.data(), got_small.size(), 3, other.get(), 0);
  f(1).recv(0, got_big.data(), got_big.size(), 4, other.get(), 0);
  ASSERT_TRUE(wait_one(*other).ok());
  ASSERT_TRUE(wait_one(*other).ok());
  EXPECT_EQ(got_small, small);
  EXPECT_EQ(got_big, big);
  EXPECT_TRUE(std::all_of(cancelled.begin(), cancelled.end(), [](uint8_t b) { return b == 0x11; }));
}

TEST_P(ShmPair, CancelDuringATransferStopsWritesAndKeepsThePairInSync) {
  const size_t n = 48 << 20;
  auto data = pattern(n, 8);
  std::vector<uint8_t> dst(n, 0);
  f(1).recv(0, dst.data(), n, 1, &cq(1), 0);
  f(0).send(1, data.data(), n, 1, 0, &cq(0), 0);
  // Cancel once data is landing (mid-transfer, or done: correct either way).
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::atomic_ref<uint8_t>(dst[0]).load(std::memory_order_relaxed) == 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  f(1).cancel(&cq(1));
  Completion c = wait_one(cq(1));
  if (!c.ok()) {
    EXPECT_EQ(c.error->category(), ErrorCategory::kAborted);
  }
  std::fill(dst.begin(), dst.end(), 0x5a);  // from now on nothing may write here
  Completion s = wait_one(cq(0));
  if (!s.ok()) {  // the copy fallback: the sender learns that its data was dropped
    EXPECT_EQ(s.error->category(), ErrorCategory::kRemote) << s.error->what();
  }
  round_trip(pattern(1 << 20, 3), true);  // the pair still works, in sync
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t b) { return b == 0x5a; }));
}

TEST_P(ShmRma, CancelStopsAPendingReadAndAtomic) {
  std::vector<uint8_t> local(5 << 20, 0x33);
  f(0).read(1, local.data(), local.size(), rk_, 0, &cq(0), 1);
  f(0).cancel(&cq(0));
  Completion c = done();
  if (!c.ok()) {
    EXPECT_EQ(c.error->category(), ErrorCategory::kAborted);
  }
  std::fill(local.begin(), local.end(), 0x44);  // nothing may write here any more
  uint64_t old = 0;
  f(0).fetch_add(1, &old, rk_, 0, 1, &cq(0), 2);  // the pair still works
  ASSERT_TRUE(done().ok());
  EXPECT_TRUE(std::all_of(local.begin(), local.end(), [](uint8_t b) { return b == 0x44; }));
}

// --- setup, shutdown, cleanup ---

TEST(ShmFabric, WrongJobTokenFailsCreation) {
  auto store = make_hash_store();
  Config config = test_config();
  config.connect_timeout = 1500ms;
  std::exception_ptr e0, e1;
  std::thread t1([&] {
    try {
      create_shm_fabric(options_for(1, 2, store, config, "right", unique_name("token")));
    } catch (...) {
      e1 = std::current_exception();
    }
  });
  try {
    create_shm_fabric(options_for(0, 2, store, config, "wrong", unique_name("token")));
  } catch (...) {
    e0 = std::current_exception();
  }
  t1.join();
  ASSERT_TRUE(e0 && e1);
  // Whoever maps the other's segment first finds the mismatch; the other one either finds it
  // too or finds that segment gone (its owner gave up).
  int mismatches = 0;
  for (auto& e : {e0, e1}) {
    try {
      std::rethrow_exception(e);
    } catch (const Error& err) {
      if (err.category() == ErrorCategory::kInvalidUsage) {
        EXPECT_NE(std::string(err.what()).find("job token"), std::string::npos) << err.what();
        ++mismatches;
      } else {
        EXPECT_EQ(err.category(), ErrorCategory::kRemote) << err.what();
        EXPECT_NE(std::string(err.what()).find("is gone"), std::string::npos) << err.what();
      }
    }
  }
  EXPECT_GE(mismatches, 1);
  EXPECT_TRUE(job_segments("right", unique_name("token")).empty());
  EXPECT_TRUE(job_segments("wrong", unique_name("token")).empty());
}

TEST(ShmFabric, MissingRankTimesOutNamingItAndLeavesNothing) {
  auto store = make_hash_store();
  Config config = test_config();
  config.connect_timeout = 500ms;
  std::vector<std::string> messages(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        create_shm_fabric(options_for(r, 3, store, config, "missing", unique_name("missing")));
      } catch (const Error& e) {
        if (e.category() == ErrorCategory::kTimeout) messages[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& m : messages)
    EXPECT_NE(m.find("rank(s) 2 never published"), std::string::npos) << m;
  EXPECT_TRUE(job_segments("missing", unique_name("missing")).empty());
}

TEST(ShmFabric, SegmentsAreUnlinkedOnceEveryoneIsAttached) {
  auto f = make_fabrics(3, test_config(),
                        [](FabricOptions& o) { o.name = unique_name("unlinked"); });
  EXPECT_TRUE(job_segments("job-secret", unique_name("unlinked")).empty());
  auto cq = f[0]->create_cq();
  uint64_t v = 1;
  f[0]->send(2, &v, 8, 0, 0, cq.get(), 0);  // still works through the unlinked segments
  EXPECT_TRUE(wait_one(*cq).ok());
}

TEST(ShmFabric, CmaOnWhereItWorksAndOffEverywhere) {
  if (!cma_available()) GTEST_SKIP() << "no cross-memory attach here";
  EXPECT_NO_THROW(make_fabrics(2, test_config("on")));
  // Mixed settings: "off" on one side makes the pair copy; "on" on the other is then an
  // error there, naming the setting.
  auto store = make_hash_store();
  std::exception_ptr e0, e1;
  std::thread t1([&] {
    try {
      create_shm_fabric(options_for(1, 2, store, test_config("off")));
    } catch (...) {
      e1 = std::current_exception();
    }
  });
  try {
    create_shm_fabric(options_for(0, 2, store, test_config("on")));
  } catch (...) {
    e0 = std::current_exception();
  }
  t1.join();
  EXPECT_FALSE(e1);
  ASSERT_TRUE(e0);
  try {
    std::rethrow_exception(e0);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("PLAIT_SHM_CMA=on"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_fabrics(2, test_config("sometimes")), Error);
}

TEST_P(ShmPair, PeerShutdownFailsPendingAndLaterOps) {
  char buf[16];
  f(0).recv(1, buf, sizeof buf, 1, &cq(0), 7);
  std::vector<uint8_t> big(1 << 20, 1);
  f(0).send(1, big.data(), big.size(), 2, 0, &cq(0), 8);  // rendezvous, never received
  f_[1].reset();
  cqs_[1].reset();
  for (int i = 0; i < 2; ++i) {
    Completion c = wait_one(cq(0));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error->category(), ErrorCategory::kRemote);
    EXPECT_TRUE(c.context == 7 || c.context == 8);
    EXPECT_NE(c.error->message().find("rank 1"), std::string::npos) << c.error->what();
  }
  EXPECT_TRUE(f(0).peer_failed(1));
  f(0).send(1, buf, 8, 1, 0, &cq(0), 9);
  Completion c = wait_one(cq(0));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error->category(), ErrorCategory::kRemote);
  uint64_t old;
  f(0).fetch_add(1, &old, RemoteKey{}, 0, 1, &cq(0), 10);
  c = wait_one(cq(0));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error->category(), ErrorCategory::kRemote);
}

TEST_P(ShmPair, MessageSentBeforePeerLeftIsStillDelivered) {
  uint64_t v = 99, got = 0;
  f(1).send(0, &v, 8, 1, 0, &cq(1), 0);
  ASSERT_TRUE(wait_one(cq(1)).ok());
  f_[1].reset();
  cqs_[1].reset();
  f(0).recv(1, &got, 8, 1, &cq(0), 0);
  Completion c = wait_one(cq(0));
  EXPECT_TRUE(c.ok()) << c.error->what();
  EXPECT_EQ(got, 99u);
}

// --- measurements (printed, not asserted) ---

// Ping-pong of 8-byte messages between two threads, then 64 MiB transfers, per wait policy.
TEST(ShmFabric, ReportsLatencyAndThroughput) {
  for (const char* cma : {"auto", "off"})
    for (WaitPolicy policy : {WaitPolicy::kSpin, WaitPolicy::kHybrid, WaitPolicy::kBlock}) {
      if (std::string(cma) == "off" && policy != WaitPolicy::kSpin) continue;
      Config config = test_config(cma);
      config.wait_policy = policy;
      config.spin_time = std::chrono::microseconds(100);
      auto f = make_fabrics(2, config);
      auto cq0 = f[0]->create_cq(), cq1 = f[1]->create_cq();
      constexpr int kIters = 5000, kWarmup = 500;
      std::thread echo([&] {
        uint64_t v = 0;
        for (int i = 0; i < kIters + kWarmup; ++i) {
          f[1]->recv(0, &v, 8, 1, cq1.get(), 0);
          ASSERT_TRUE(wait_one(*cq1).ok());
          f[1]->send(0, &v, 8, 1, 0, cq1.get(), 0);
          ASSERT_TRUE(wait_one(*cq1).ok());
        }
      });
      uint64_t ping = 0, pong = 0;
      Clock::time_point start;
      for (int i = 0; i < kIters + kWarmup; ++i) {
        if (i == kWarmup) start = Clock::now();
        f[0]->recv(1, &pong, 8, 1, cq0.get(), 0);
        f[0]->send(1, &ping, 8, 1, 0, cq0.get(), 0);
        for (int k = 0; k < 2; ++k) ASSERT_TRUE(wait_one(*cq0).ok());
      }
      double one_way_us = seconds_since(start) * 1e6 / kIters / 2;
      echo.join();

      const size_t n = 64 << 20;
      std::vector<uint8_t> src(n, 1), dst(n, 2);
      constexpr int kReps = 4;
      double best = 1e9;
      for (int rep = 0; rep < kReps; ++rep) {
        auto t0 = Clock::now();
        f[1]->recv(0, dst.data(), n, 2, cq1.get(), 0);
        f[0]->send(1, src.data(), n, 2, 0, cq0.get(), 0);
        ASSERT_TRUE(wait_one(*cq1).ok());
        ASSERT_TRUE(wait_one(*cq0).ok());
        best = std::min(best, seconds_since(t0));
      }
      const char* name = policy == WaitPolicy::kSpin    ? "spin"
                         : policy == WaitPolicy::kBlock ? "block"
                                                        : "hybrid";
      std::printf("[ report ] shm fabric (cma %s), wait %s: 8-byte one-way latency %.2f us; "
                  "64 MiB send/recv %.2f GB/s (best of %d)\n",
                  cma, name, one_way_us, n / best / 1e9, kReps);
    }
}

}  // namespace
}  // namespace plait::transport
