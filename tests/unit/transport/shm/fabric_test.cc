// The shm provider's own tests (every provider's are in fabric_provider_test.cc, which runs
// shm too): its eager threshold and rings, its place in a composite fabric, the job token of
// its segments and their cleanup, cross-memory attach. Ranks are threads of this process,
// each with its own Fabric and segment over one in-process store; cross-memory attach works
// within one process too (a process may read and write itself), so both the CMA paths and the
// copy fallback (PLAIT_SHM_CMA=off) run here. tests/multiproc/transport/shm_fabric_fault_test.cc covers
// processes.
#include "transport/providers.h"
#include "transport/shm/shm_provider.h"
#include "unit/transport/shm/shm_test_support.h"

namespace plait::transport::shm_test {
namespace {

INSTANTIATE_TEST_SUITE_P(Cma, ShmPair, ::testing::Values("on", "off"));

TEST_P(ShmPair, EagerThresholdInItsRangeAndTheProviderListed) {
  EXPECT_GE(threshold(), 4u * 1024);
  EXPECT_LE(threshold(), 64u * 1024);
  bool listed = false;
  for (const Capabilities& c : provider_capabilities(Config{})) listed |= c.provider == "shm";
  EXPECT_TRUE(listed);
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

}  // namespace
}  // namespace plait::transport::shm_test
