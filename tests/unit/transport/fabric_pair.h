// Shared by the providers' unit tests (fabric_provider_test.cc: every provider;
// tcp_fabric_test.cc and shm_fabric_test.cc: each provider's own): ranks as threads of this process, each with its own Fabric,
// one in-process store, and a pair of ranks with a completion queue each.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "plait/store.h"
#include "transport/fabric.h"
#include "transport/shm/shm_provider.h"
#include "transport/shm/shm_settings.h"
#include "transport/tcp/tcp_provider.h"
#include "transport/tcp/tcp_settings.h"
#include "transport/ucx/ucx_provider.h"
#include "transport/ucx/ucx_settings.h"
#include "unit/transport/fabric_test_support.h"

namespace plait::transport::test {

using namespace std::chrono_literals;

// A provider as the tests run it: which factory, over which UCX transports, and the words
// its setup errors use.
struct ProviderCase {
  std::string name;      // test-name suffix: "tcp", "ucx_tcp", "ucx_sm", "shm_cma_on"
  std::string provider;  // "tcp", "ucx" or "shm"
  std::string ucx_tls;   // PLAIT_UCX_TLS for ucx
  // What a rank that never joins is called, and what is said of ranks that did not meet.
  std::string never_published;
  std::string did_not_meet;
  std::string shm_cma;   // PLAIT_SHM_CMA for shm
};

inline ProviderCase tcp_case() {
  return {"tcp", "tcp", "", "rank(s) 2 never published an address", "never connected"};
}
inline ProviderCase ucx_case(const std::string& tls) {
  std::string name = "ucx_";
  for (char c : tls) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return {name, "ucx", tls, "rank(s) 2 never published a UCX address", "no hello came"};
}
// shm with cross-memory attach on (single-copy rendezvous and one-sided operations) or off
// (copies through the rings).
inline ProviderCase shm_case(const std::string& cma) {
  return {"shm_cma_" + cma, "shm", "", "rank(s) 2 never published", "never attached", cma};
}
inline void PrintTo(const ProviderCase& c, std::ostream* os) { *os << c.name; }

// The case cannot run on this machine (then the test is skipped, saying why).
inline std::string unavailable(const ProviderCase& c) {
  return c.shm_cma == "on" && !cma_available() ? "no cross-memory attach here" : "";
}

// The case the running test is over (set by its fixture).
inline ProviderCase g_case = tcp_case();

inline Config test_config() {
  Config c;
  c.connect_timeout = 10s;
  c.timeout = 10s;
  c.get<transport::TcpSettings>().streams = 2;
  c.get<transport::TcpSettings>().stripe_bytes = 256 * 1024;
  c.get<transport::UcxSettings>().tls = g_case.ucx_tls;
  if (!g_case.shm_cma.empty()) c.get<transport::ShmSettings>().cma = g_case.shm_cma;
  return c;
}

inline std::unique_ptr<Fabric> create_for(const FabricOptions& options) {
  if (g_case.provider == "shm") return create_shm_fabric(options);
  return g_case.provider == "ucx" ? create_ucx_fabric(options) : create_tcp_fabric(options);
}

inline FabricOptions options_for(int rank, int size, std::shared_ptr<Store> store, const Config& config,
                          const std::string& token = "job-secret") {
  return test::fabric_options(rank, size, std::move(store), config, token, "test");
}

// Creates `size` fabrics concurrently (creation blocks until the mesh is up).
inline std::vector<std::unique_ptr<Fabric>> make_fabrics(int size, const Config& config) {
  return test::make_fabrics_concurrently(size, [&](int r, std::shared_ptr<Store> store) {
    return create_for(options_for(r, size, std::move(store), config));
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

// Two ranks and a completion queue each, over g_case's provider.
class FabricPair : public ::testing::Test {
 protected:
  void SetUp() override { start(test_config()); }
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

  // Sends `data` 0 -> 1 and checks what arrives, with the recv posted first or last.
  void round_trip(const std::vector<uint8_t>& data, bool recv_first) {
    std::vector<uint8_t> out(data.size() + 16, 0xee);
    auto post_recv = [&] { f(1).recv(0, out.data(), out.size(), 77, &cq(1), 2); };
    if (recv_first) post_recv();
    f(0).send(1, data.data(), data.size(), 77, 0xabcdef0123ull, &cq(0), 1);
    if (!recv_first) {
      std::this_thread::sleep_for(20ms);  // lets an eager message arrive unexpected
      post_recv();
    }
    Completion s = wait_one(cq(0)), r = wait_one(cq(1));
    ASSERT_TRUE(s.ok()) << s.error->what();
    ASSERT_TRUE(r.ok()) << r.error->what();
    EXPECT_EQ(s.op, OpType::kSend);
    EXPECT_EQ(s.context, 1u);
    EXPECT_EQ(r.op, OpType::kRecv);
    EXPECT_EQ(r.context, 2u);
    EXPECT_EQ(r.peer, 0);
    EXPECT_EQ(r.tag, 77u);
    EXPECT_EQ(r.bytes, data.size());
    EXPECT_EQ(r.header, 0xabcdef0123ull);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin())) << data.size() << " bytes";
    EXPECT_EQ(out[data.size()], 0xee) << "wrote past the message";
  }

  std::vector<std::unique_ptr<Fabric>> f_;
  std::vector<std::unique_ptr<CompletionQueue>> cqs_;
};


// A pair with a 6 MiB region of rank 1's, open to every access, and the queue its
// immediates complete into.
class FabricRmaPair : public FabricPair {
 protected:
  void SetUp() override {
    FabricPair::SetUp();
    target_.assign(kRegion, 0);
    region_ = f(1).register_memory(target_.data(), kRegion, kAccessAll);
    rk_ = region_->remote_key();
    imm_cq_ = f(1).create_cq();
    f(1).set_imm_cq(imm_cq_.get());
  }
  void TearDown() override {
    region_.reset();
    FabricPair::TearDown();  // before imm_cq_, which rank 1 delivers into
  }
  // The completion of rank 0's operation.
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
  alignas(64) std::vector<uint8_t> target_;
  std::unique_ptr<MemoryRegion> region_;
  RemoteKey rk_;
  std::unique_ptr<CompletionQueue> imm_cq_;
};

}  // namespace plait::transport::test
