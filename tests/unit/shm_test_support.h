// Shared by the shm provider's unit tests: ranks as threads of this process, each with its
// own Fabric and segment over one in-process store, and the fixtures that set a pair up with
// cross-memory attach on or off (the test parameter).
#pragma once

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
#include "fabric_test_support.h"
#include "transport/fabric.h"
#include "transport/memory_registry.h"
#include "transport/shm/segment.h"

namespace plait::transport::shm_test {

using namespace std::chrono_literals;
using test::cma_available;

inline Config test_config(const std::string& cma = "auto") {
  Config c;
  c.connect_timeout = 10s;
  c.timeout = 10s;
  c.shm_cma = cma;
  return c;
}

inline FabricOptions options_for(int rank, int size, std::shared_ptr<Store> store, const Config& config,
                                 const std::string& token = "job-secret",
                                 const std::string& name = "shm-test") {
  return test::fabric_options(rank, size, std::move(store), config, token, name);
}

// Creates `size` fabrics concurrently (creation blocks until every rank is attached).
inline std::vector<std::unique_ptr<Fabric>> make_fabrics(
    int size, const Config& config,
    const std::function<void(FabricOptions&)>& adjust = [](FabricOptions&) {}) {
  return test::make_fabrics_concurrently(size, [&](int r, std::shared_ptr<Store> store) {
    FabricOptions o = options_for(r, size, std::move(store), config);
    adjust(o);
    return create_shm_fabric(o);
  });
}

inline Completion wait_one(CompletionQueue& cq) {
  Completion c;
  EXPECT_TRUE(cq.wait(&c, 20s)) << "no completion within 20 s";
  return c;
}

inline std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 11));
  return v;
}

inline std::string format(uint64_t key) { return format_key(key); }

// A fabric name of this process alone, for tests that look into /dev/shm (ctest runs test
// cases of this binary side by side).
inline std::string unique_name(const std::string& base) { return base + "-" + std::to_string(::getpid()); }

// Entries of /dev/shm that belong to the job (token, name) of these tests.
inline std::vector<std::string> job_segments(const std::string& token, const std::string& name) {
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
      if (s.context == 1) {
        EXPECT_EQ(s.bytes, data.size());
      }
    }
  }

  std::vector<std::unique_ptr<Fabric>> f_;
  std::vector<std::unique_ptr<CompletionQueue>> cqs_;
};


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


}  // namespace plait::transport::shm_test
