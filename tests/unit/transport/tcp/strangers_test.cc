// Strangers at the tcp provider's listener, open while a fabric is set up: rank 1 waits for
// rank 0 while a party says nothing, sends garbage, forges or replays the handshake, sends a
// hello with a 4 GiB name, and floods it with silent connections. Each is dropped, and the
// two ranks then meet and move data as usual.
#include <gtest/gtest.h>

#include <thread>

#include "support/strangers.h"
#include "transport/fabric.h"
#include "transport/tcp/tcp_provider.h"
#include "transport/tcp/tcp_settings.h"
#include "unit/transport/fabric_test_support.h"

namespace plait::transport {
namespace {

using namespace std::chrono_literals;
using namespace plait::testing::strangers;

TEST(TcpStrangers, AreDroppedWhileTheRanksMeet) {
  auto store = make_hash_store();
  Config config;
  config.connect_timeout = 60s;
  config.get<transport::TcpSettings>().streams = 2;
  std::unique_ptr<Fabric> f1;
  std::thread rank1([&] {
    f1 = create_tcp_fabric(test::fabric_options(1, 2, store, config, "job-secret", "test"));
  });
  const std::string address = store->get_string("test/addr/1", 10s);
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  Visit v;
  std::vector<net::Fd> held;
  visit(port, "plait tcp fabric", "job-secret", v, held);
  // A flood of silent connections, more than the acceptor authenticates at once: the oldest
  // give way, and rank 0 still gets through.
  for (int i = 0; i < 200; ++i) held.push_back(dial(port));
  for (const std::string& f : v.failures) ADD_FAILURE() << f;
  auto f0 = create_tcp_fabric(test::fabric_options(0, 2, store, config, "job-secret", "test"));
  rank1.join();
  ASSERT_TRUE(f1);
  auto cq0 = f0->create_cq(), cq1 = f1->create_cq();
  std::vector<uint8_t> out(1 << 20), in(out.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7);
  f1->recv(0, in.data(), in.size(), 3, cq1.get(), 1);
  f0->send(1, out.data(), out.size(), 3, 0, cq0.get(), 2);
  Completion c;
  ASSERT_TRUE(cq1->wait(&c, 20s));
  EXPECT_TRUE(c.ok());
  ASSERT_TRUE(cq0->wait(&c, 20s));
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(in, out);
}

}  // namespace
}  // namespace plait::transport
