// What only the TCP provider has: several streams per peer, and the job-token handshake on
// each connection. Every provider's common tests run over tcp too: fabric_provider_test.cc.
#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <thread>

#include "transport/tcp/tcp_provider.h"
#include "transport/tcp/tcp_settings.h"
#include "unit/transport/fabric_pair.h"

namespace plait::transport {
namespace {

using namespace std::chrono_literals;
using namespace test;

class TcpPair : public FabricPair {
 protected:
  void SetUp() override {
    g_case = tcp_case();
    FabricPair::SetUp();
  }
};

TEST_F(TcpPair, CapabilitiesAndCostModel) {
  EXPECT_EQ(f(0).capabilities().provider, "tcp");
  EXPECT_EQ(f(0).capabilities().streams_per_peer, 2);
  // Above a collective's 1 MiB chunk (no round trip per chunk), small enough to bound what
  // one unexpected message pins.
  EXPECT_GT(threshold(), 1024u * 1024);
  EXPECT_LE(threshold(), 4u * 1024 * 1024);
  EXPECT_EQ(f(1).rank(), 1);
  EXPECT_EQ(f(1).size(), 2);
  EXPECT_FALSE(f(0).peer_failed(1));
}

class TcpStreams : public TcpPair, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    g_case = tcp_case();
    Config c = test_config();
    c.get<transport::TcpSettings>().streams = GetParam();
    start(c);
  }
};

TEST_P(TcpStreams, LargeAndSmallMessagesArriveIntact) {
  EXPECT_EQ(f(0).capabilities().streams_per_peer, GetParam());
  for (size_t n : {size_t{1}, threshold(), size_t{(5 << 20) + 11}})
    round_trip(pattern(n, 9), /*recv_first=*/true);
}

INSTANTIATE_TEST_SUITE_P(TcpFabric, TcpStreams, ::testing::Values(1, 4));

TEST(TcpFabric, WrongJobTokenFailsCreation) {
  auto store = make_hash_store();
  Config config = test_config();
  config.connect_timeout = 1500ms;
  std::exception_ptr e0, e1;
  std::thread t1([&] {
    try {
      create_tcp_fabric(options_for(1, 2, store, config, "right"));
    } catch (...) {
      e1 = std::current_exception();
    }
  });
  try {
    create_tcp_fabric(options_for(0, 2, store, config, "wrong"));
  } catch (...) {
    e0 = std::current_exception();
  }
  t1.join();
  ASSERT_TRUE(e0 && e1);
  try {
    std::rethrow_exception(e0);
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage) << e.what();
    EXPECT_NE(std::string(e.what()).find("token"), std::string::npos) << e.what();
  }
  try {
    std::rethrow_exception(e1);
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank(s) 0 never connected"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace plait::transport
