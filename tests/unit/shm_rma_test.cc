// The shm provider's one-sided operations (write, write with immediate, read, atomics),
// their access checks and deregistration, with cross-memory attach on and off.
#include "shm_test_support.h"

namespace plait::transport::shm_test {
namespace {

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
