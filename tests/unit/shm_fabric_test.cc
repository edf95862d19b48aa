// The shm provider with ranks as threads of this process, each with its own Fabric and its
// own segment, sharing one in-process store. Cross-memory attach works within one process
// too (a process may read and write itself), so both the CMA paths and the copy fallback
// (PLAIT_SHM_CMA=off) run here; tests/multiproc/shm_fabric_fault_test.cc covers processes.
#include "shm_test_support.h"

namespace plait::transport::shm_test {
namespace {

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
}  // namespace plait::transport::shm_test
