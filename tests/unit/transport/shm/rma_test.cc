// The shm provider's own one-sided behaviour, with cross-memory attach on and off (every
// provider's one-sided tests are in fabric_provider_test.cc, which runs shm too): where a
// refused write is checked, regions past the shared table, cancelling a pending read.
#include "unit/transport/shm/shm_test_support.h"

namespace plait::transport::shm_test {
namespace {

INSTANTIATE_TEST_SUITE_P(Cma, ShmRma, ::testing::Values("on", "off"));

// A write that runs off the end of its region: with cross-memory attach the initiator checks
// it before the copy, so nothing at all lands; without, the target checks it piece by piece
// (as tcp does) and applies none of the refused pieces.
TEST_P(ShmRma, AWriteOffTheEndIsRefusedWhereItIsChecked) {
  std::vector<uint8_t> big(2 << 20, 0xab);
  f(0).write(1, big.data(), big.size(), rk_, kRegion - (1 << 20), std::nullopt, &cq(0), 0);
  expect_denied(done(), "exceeds region");
  if (GetParam() == "on") {
    EXPECT_TRUE(target_untouched());
  } else {
    EXPECT_TRUE(std::all_of(target_.begin(), target_.begin() + (kRegion - (1 << 20)),
                            [](uint8_t b) { return b == 0; }));
  }
  auto data = pattern(64, 1);
  f(0).write(1, data.data(), 64, rk_, 0, std::nullopt, &cq(0), 0);  // still in sync
  ASSERT_TRUE(done().ok());
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

}  // namespace
}  // namespace plait::transport::shm_test
