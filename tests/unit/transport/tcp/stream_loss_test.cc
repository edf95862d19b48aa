// One tcp stream of several breaks in the middle of a transfer: the transfer goes on over
// the others, the data arrives intact, and the pair keeps working; stream 0 breaking fails
// the peer, as before.
#include <gtest/gtest.h>

#include <thread>

#include "transport/fabric.h"
#include "transport/tcp/tcp_fabric.h"
#include "transport/tcp/tcp_provider.h"
#include "transport/tcp/tcp_settings.h"
#include "unit/transport/fabric_test_support.h"

namespace plait::transport {
namespace {

using namespace std::chrono_literals;

struct Pair {
  std::vector<std::unique_ptr<Fabric>> f;
  std::unique_ptr<CompletionQueue> cq0, cq1;
  tcp::TcpFabric& tcp(int r) { return dynamic_cast<tcp::TcpFabric&>(*f[r]); }
};

Pair make_pair(int streams) {
  Config config;
  config.connect_timeout = 20s;
  config.timeout = 20s;
  config.get<transport::TcpSettings>().streams = streams;
  config.get<transport::TcpSettings>().stripe_bytes = 64 * 1024;
  Pair p;
  p.f = test::make_fabrics_concurrently(2, [&](int r, std::shared_ptr<Store> store) {
    return create_tcp_fabric(test::fabric_options(r, 2, std::move(store), config, "t", "loss"));
  });
  p.cq0 = p.f[0]->create_cq();
  p.cq1 = p.f[1]->create_cq();
  return p;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

// Rank 0 sends `bytes` to rank 1 (rendezvous: above the eager threshold); `during` runs once
// the transfer is under way. Returns both completions' errors ("" when fine).
std::pair<std::string, std::string> transfer(Pair& p, size_t bytes, uint8_t seed,
                                             const std::function<void()>& during = nullptr) {
  const std::vector<uint8_t> out = pattern(bytes, seed);
  std::vector<uint8_t> in(bytes);
  p.f[1]->recv(0, in.data(), in.size(), 4, p.cq1.get(), 1);
  p.f[0]->send(1, out.data(), out.size(), 4, 0, p.cq0.get(), 2);
  if (during) during();
  Completion c0, c1;
  EXPECT_TRUE(p.cq1->wait(&c1, 30s));
  EXPECT_TRUE(p.cq0->wait(&c0, 30s));
  if (c1.ok()) {
    EXPECT_TRUE(in == out) << "the data arrived altered";
  }
  return {c0.ok() ? "" : c0.error->what(), c1.ok() ? "" : c1.error->what()};
}

TEST(TcpStreamLoss, ATransferGoesOnOverTheOtherStreams) {
  for (int side : {0, 1}) {  // the sender's socket breaks, or the receiver's
    Pair p = make_pair(3);
    auto [e0, e1] = transfer(p, 64 << 20, 1, [&] {
      std::this_thread::sleep_for(2ms);
      p.tcp(side).break_stream_for_test(1 - side, 1);
    });
    EXPECT_EQ(e0, "") << "side " << side;
    EXPECT_EQ(e1, "") << "side " << side;
    EXPECT_FALSE(p.f[0]->peer_failed(1));
    EXPECT_FALSE(p.f[1]->peer_failed(0));
    // And later transfers use the streams left, both ways.
    auto [l0, l1] = transfer(p, 8 << 20, 2);
    EXPECT_EQ(l0 + l1, "");
  }
}

TEST(TcpStreamLoss, TwoStreamsOfThreeMayGo) {
  Pair p = make_pair(3);
  auto [e0, e1] = transfer(p, 32 << 20, 3, [&] {
    p.tcp(0).break_stream_for_test(1, 1);
    std::this_thread::sleep_for(1ms);
    p.tcp(1).break_stream_for_test(0, 2);
  });
  EXPECT_EQ(e0 + e1, "");
}

TEST(TcpStreamLoss, StreamZeroBreakingFailsThePeer) {
  Pair p = make_pair(2);
  auto [e0, e1] = transfer(p, 32 << 20, 4, [&] { p.tcp(0).break_stream_for_test(1, 0); });
  EXPECT_NE(e1, "");
  EXPECT_TRUE(p.f[1]->peer_failed(0));
}

}  // namespace
}  // namespace plait::transport
