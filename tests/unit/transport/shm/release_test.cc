// When the shm provider says memory is released (a cancelled send, a deregistered region, a
// fabric gone), nothing of it is still in use: the caller may unmap it next.
#include <sys/mman.h>

#include "transport/shm/cma.h"
#include "transport/shm/region_table.h"
#include "unit/transport/shm/shm_test_support.h"

namespace plait::transport::shm_test {
namespace {

// A send buffer the test can unmap: a copy out of it after cancel() returned faults.
struct Mapping {
  explicit Mapping(size_t n) : bytes(n) {
    base = static_cast<uint8_t*>(
        ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base == MAP_FAILED) throw std::runtime_error("mmap failed");
  }
  void unmap() {
    if (base) ::munmap(base, bytes);
    base = nullptr;
  }
  ~Mapping() { unmap(); }
  uint8_t* base = nullptr;
  size_t bytes;
};

// Through the rings (no cross-memory attach) the sender's own progress copies the send
// buffer into the ring piece by piece. cancel() must fence those copies: once it returns,
// the buffer is unmapped here, and a copy still running or started after would fault.
TEST(ShmRelease, CancelledSendIsNoLongerReadOnceCancelReturns) {
  auto f = make_fabrics(2, test_config("off"));
  const size_t n = 24 << 20;
  std::vector<uint8_t> dst(n);
  for (int round = 0; round < 12; ++round) {
    auto cq0 = f[0]->create_cq(), cq1 = f[1]->create_cq();
    Mapping src(n);
    std::memset(src.base, round + 1, n);
    f[1]->recv(0, dst.data(), n, 7, cq1.get(), 1);
    f[0]->send(1, src.base, n, 7, 0, cq0.get(), 2);
    // Cancel once pieces are landing: the sender is then copying most of the time.
    const Deadline deadline = Deadline::after(20s);
    while (std::atomic_ref<uint8_t>(dst[0]).load(std::memory_order_relaxed) != round + 1 &&
           !deadline.expired())
      std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(100 * (round % 4)));
    f[0]->cancel(cq0.get());
    src.unmap();
    Completion s = wait_one(*cq0);
    if (!s.ok()) {
      EXPECT_EQ(s.error->category(), ErrorCategory::kAborted) << s.error->what();
    }
    Completion r = wait_one(*cq1);  // done, or told the send was withdrawn
    if (!r.ok()) {
      EXPECT_NE(r.error->message().find("rank 0"), std::string::npos) << r.error->what();
    }
  }
  // The pair is still in step.
  uint64_t out = 42, in = 0;
  auto cq0 = f[0]->create_cq(), cq1 = f[1]->create_cq();
  f[1]->recv(0, &in, 8, 8, cq1.get(), 1);
  f[0]->send(1, &out, 8, 8, 0, cq0.get(), 2);
  ASSERT_TRUE(wait_one(*cq1).ok());
  EXPECT_EQ(in, 42u);
}

// The owner's table in a private segment, and a peer (index 0, "rank 5") that pins through
// the very protocol the provider's initiators use.
class RegionTable : public ::testing::Test {
 protected:
  void SetUp() override {
    g_ = shm::make_geometry(1, 4096, 8);
    segment_ = SharedMemory::create(unique_name("/plait-release-test"), g_.total_bytes);
    segment_.unlink();
    shm::SegmentView view(segment_.base(), g_);
    publisher_ = std::make_unique<shm::RegionPublisher>(
        view, 3, std::vector<int>{5}, [](uint32_t) { return false; }, 50ms);
    registry_->add_listener(publisher_.get());
    peer_ = shm::RemoteRegions(view, 0);
  }
  void TearDown() override {
    publisher_->retire_all();
    registry_->remove_listener(publisher_.get());
  }

  shm::Geometry g_;
  SharedMemory segment_;
  std::shared_ptr<MemoryRegistry> registry_ = std::make_shared<MemoryRegistry>();
  std::unique_ptr<shm::RegionPublisher> publisher_;
  shm::RemoteRegions peer_;
};

// A peer that holds a pin past the bound (a stopped process) keeps the region alive:
// deregister() fails naming it instead of pretending the memory is free, the key stays
// unreachable, and once the pin goes deregistration succeeds.
TEST_F(RegionTable, DeregisterWhileAPeerHoldsAPinFailsNamingItAndSucceedsLater) {
  char buf[256];
  RegistryMemoryRegion region(registry_, registry_->add(buf, sizeof buf, kAccessAll));
  const uint64_t key = region.remote_key().key;
  shm::PinnedRegion pin;
  ASSERT_TRUE(peer_.pin(key, &pin)) << "the region was not published";

  try {
    region.deregister();
    FAIL() << "deregister() returned while rank 5 held a pin";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(e.message().find("rank 5 still accesses the region after 50 ms"), std::string::npos)
        << e.what();
    EXPECT_NE(e.message().find(format(key)), std::string::npos) << e.what();
  }
  // Nobody reaches it meanwhile, neither locally nor through the table...
  std::string why;
  EXPECT_EQ(registry_->check(key, 0, 1, AccessKind::kWrite, &why), nullptr);
  shm::PinnedRegion again;
  EXPECT_FALSE(peer_.pin(key, &again));
  // ...and a new region neither gets its key nor its slot.
  char other[64];
  RegistryMemoryRegion next(registry_, registry_->add(other, sizeof other, kAccessAll));
  EXPECT_NE(next.remote_key().key, key);
  shm::PinnedRegion next_pin;
  ASSERT_TRUE(peer_.pin(next.remote_key().key, &next_pin));
  EXPECT_NE(next_pin.slot, pin.slot);
  peer_.unpin(next_pin);

  peer_.unpin(pin);
  EXPECT_NO_THROW(region.deregister());
  EXPECT_NO_THROW(region.deregister());  // idempotent
}

// The destructor cannot throw; it must not return while the pin is held either.
TEST_F(RegionTable, DestroyingARegionWaitsForTheLastPin) {
  char buf[256];
  auto region = std::make_unique<RegistryMemoryRegion>(
      registry_, registry_->add(buf, sizeof buf, kAccessAll));
  shm::PinnedRegion pin;
  ASSERT_TRUE(peer_.pin(region->remote_key().key, &pin));
  std::atomic<bool> unpinned{false};
  std::thread peer([&] {
    std::this_thread::sleep_for(200ms);  // several bounds of 50 ms: logged, not abandoned
    unpinned = true;
    peer_.unpin(pin);
  });
  region.reset();
  EXPECT_TRUE(unpinned.load()) << "the region was released while the peer still held it";
  peer.join();
}

// PR_SET_PTRACER_ANY lets any process of this user attach to us: granted only while some
// pair of some fabric uses cross-memory attach, and withdrawn with the last of them.
TEST(ShmRelease, PtracerPermissionOnlyWhileCrossMemoryAttachIsUsed) {
  ASSERT_FALSE(shm::cma_permission_granted());
  {
    auto f = make_fabrics(2, test_config("off"));
    EXPECT_FALSE(shm::cma_permission_granted()) << "granted with PLAIT_SHM_CMA=off";
  }
  if (!cma_available()) GTEST_SKIP() << "no cross-memory attach here";
  {
    auto f = make_fabrics(2, test_config("on"));
    EXPECT_TRUE(shm::cma_permission_granted());
  }
  EXPECT_FALSE(shm::cma_permission_granted()) << "kept after the last fabric using it";
}

}  // namespace
}  // namespace plait::transport::shm_test
