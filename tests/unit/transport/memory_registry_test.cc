#include "transport/memory_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

namespace plait::transport {
namespace {

TEST(MemoryRegistry, CheckAcceptsInBoundsAccess) {
  MemoryRegistry registry;
  alignas(8) char buf[4096];
  RegionRef r = registry.add(buf, sizeof buf, kAccessAll);
  std::string reason;
  EXPECT_EQ(registry.check(r->key(), 0, 4096, AccessKind::kWrite, &reason), r);
  EXPECT_EQ(registry.check(r->key(), 4096, 0, AccessKind::kRead, &reason), r);
  EXPECT_EQ(registry.check(r->key(), 8, 8, AccessKind::kAtomic, &reason), r);
  EXPECT_TRUE(reason.empty());
}

TEST(MemoryRegistry, OutOfBoundsNamesKeyOffsetLengthAndRegionSize) {
  MemoryRegistry registry;
  char buf[4096];
  RegionRef r = registry.add(buf, sizeof buf, kAccessAll);
  std::string reason;
  EXPECT_EQ(registry.check(r->key(), 4096, 64, AccessKind::kWrite, &reason), nullptr);
  EXPECT_EQ(reason, "key " + format_key(r->key()) +
                        " offset 4096 + 64 bytes exceeds region of 4096 bytes");
  // An offset near 2^64 must not wrap around into bounds.
  EXPECT_EQ(registry.check(r->key(), ~uint64_t{0} - 10, 64, AccessKind::kRead, &reason), nullptr);
}

TEST(MemoryRegistry, UnknownKeyIsRefused) {
  MemoryRegistry registry;
  std::string reason;
  EXPECT_EQ(registry.check(0x1234, 0, 1, AccessKind::kRead, &reason), nullptr);
  EXPECT_NE(reason.find("key 0x0000000000001234 is not registered"), std::string::npos) << reason;
}

TEST(MemoryRegistry, AccessFlagsAreEnforced) {
  MemoryRegistry registry;
  alignas(8) char buf[64];
  RegionRef r = registry.add(buf, sizeof buf, kAccessRemoteRead);
  std::string reason;
  EXPECT_NE(registry.check(r->key(), 0, 8, AccessKind::kRead, &reason), nullptr);
  EXPECT_EQ(registry.check(r->key(), 0, 8, AccessKind::kWrite, &reason), nullptr);
  EXPECT_NE(reason.find("does not allow remote write (region access: read)"), std::string::npos)
      << reason;
  EXPECT_EQ(registry.check(r->key(), 0, 8, AccessKind::kAtomic, &reason), nullptr);
  EXPECT_NE(reason.find("remote atomic"), std::string::npos) << reason;
}

TEST(MemoryRegistry, AtomicsNeedEightByteAlignment) {
  MemoryRegistry registry;
  alignas(8) char buf[64];
  RegionRef r = registry.add(buf, sizeof buf, kAccessRemoteAtomic);
  std::string reason;
  EXPECT_EQ(registry.check(r->key(), 4, 8, AccessKind::kAtomic, &reason), nullptr);
  EXPECT_NE(reason.find("offset 4 is not 8-byte aligned"), std::string::npos) << reason;
}

TEST(MemoryRegistry, RemovedKeyIsRefusedAndPinsFail) {
  MemoryRegistry registry;
  char buf[16];
  RegionRef r = registry.add(buf, sizeof buf, kAccessAll);
  EXPECT_EQ(registry.size(), 1u);
  registry.remove(r->key());
  EXPECT_EQ(registry.size(), 0u);
  std::string reason;
  EXPECT_EQ(registry.check(r->key(), 0, 1, AccessKind::kWrite, &reason), nullptr);
  EXPECT_FALSE(static_cast<bool>(r->pin()));
  registry.remove(r->key());  // twice is harmless
}

TEST(MemoryRegistry, RemoveWaitsForAccessInFlight) {
  MemoryRegistry registry;
  char buf[16];
  RegionRef r = registry.add(buf, sizeof buf, kAccessAll);
  std::atomic<bool> removed{false};
  std::thread remover;
  {
    auto pin = r->pin();
    ASSERT_TRUE(static_cast<bool>(pin));
    remover = std::thread([&] {
      registry.remove(r->key());
      removed = true;
    });
    // The key disappears at once, but remove() cannot return while the pin is held.
    std::string reason;
    while (registry.check(r->key(), 0, 1, AccessKind::kWrite, &reason)) std::this_thread::yield();
    EXPECT_FALSE(removed.load());
  }
  remover.join();
  EXPECT_TRUE(removed.load());
}

TEST(MemoryRegistry, KeysAreUniqueAndNonzero) {
  MemoryRegistry registry;
  char buf[1];
  std::set<uint64_t> keys;
  std::vector<RegionRef> regions;
  for (int i = 0; i < 1000; ++i) {
    regions.push_back(registry.add(buf, 1, kAccessAll));
    EXPECT_NE(regions.back()->key(), 0u);
    keys.insert(regions.back()->key());
  }
  EXPECT_EQ(keys.size(), 1000u);
}

TEST(MemoryRegistry, BadArgumentsThrow) {
  MemoryRegistry registry;
  char buf[1];
  EXPECT_THROW(registry.add(nullptr, 8, kAccessAll), Error);
  EXPECT_THROW(registry.add(buf, 1, 1u << 10), Error);
  EXPECT_NO_THROW(registry.add(nullptr, 0, kAccessAll));
}

TEST(MemoryRegistry, RegionObjectDeregistersOnDestruction) {
  auto registry = std::make_shared<MemoryRegistry>();
  char buf[32];
  uint64_t key;
  {
    RegistryMemoryRegion region(registry, registry->add(buf, sizeof buf, kAccessRemoteWrite));
    RemoteKey rk = region.remote_key();
    key = rk.key;
    EXPECT_EQ(rk.addr, reinterpret_cast<uint64_t>(buf));
    EXPECT_EQ(rk.length, sizeof buf);
    EXPECT_EQ(region.access(), kAccessRemoteWrite);
    EXPECT_EQ(registry->size(), 1u);
  }
  EXPECT_EQ(registry->size(), 0u);
  std::string reason;
  EXPECT_EQ(registry->check(key, 0, 1, AccessKind::kWrite, &reason), nullptr);
}

}  // namespace
}  // namespace plait::transport
