// PLAIT_TCP_INTEGRITY: two ranks talk through a relay that flips one bit on the way from
// rank 0 to rank 1. With integrity on, the receive fails naming the peer and the stream;
// with it off the same flip is a silently wrong result (why the option exists).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "core/socket.h"
#include "transport/fabric.h"
#include "transport/tcp/tcp_provider.h"
#include "transport/tcp/tcp_settings.h"
#include "unit/transport/fabric_test_support.h"

namespace plait::transport {
namespace {

using namespace std::chrono_literals;

// Forwards every connection on its port to `target`, both ways; on the first connection,
// the byte at `flip_at` (counted from the connector's first byte) gets its low bit flipped.
class FlippingRelay {
 public:
  FlippingRelay(int target_port, size_t flip_at)
      : listener_(net::listen_tcp("127.0.0.1", 0)), target_(target_port), flip_at_(flip_at) {
    thread_ = std::thread([this] { run(); });
  }
  ~FlippingRelay() {
    stop_ = true;
    thread_.join();
  }
  int port() const { return net::local_port(listener_.get()); }

 private:
  struct Pair {
    net::Fd from_connector, to_target;
    size_t forwarded = 0;
    bool flips = false;
  };

  void run() {
    std::vector<Pair> pairs;
    while (!stop_) {
      std::vector<pollfd> fds{{listener_.get(), POLLIN, 0}};
      for (auto& p : pairs) {
        fds.push_back({p.from_connector.get(), POLLIN, 0});
        fds.push_back({p.to_target.get(), POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        Pair p;
        p.from_connector = net::accept_tcp(listener_.get(), Deadline::after(1s));
        p.to_target = net::connect_tcp("127.0.0.1", target_, Deadline::after(5s));
        p.flips = pairs.empty();
        pairs.push_back(std::move(p));
        continue;
      }
      for (size_t i = 0; i < pairs.size(); ++i) {
        Pair& p = pairs[i];
        if (fds[1 + 2 * i].revents & (POLLIN | POLLHUP)) forward(p, true);
        if (fds[2 + 2 * i].revents & (POLLIN | POLLHUP)) forward(p, false);
      }
    }
  }

  void forward(Pair& p, bool to_target) {
    char buf[65536];
    const int from = to_target ? p.from_connector.get() : p.to_target.get();
    const int to = to_target ? p.to_target.get() : p.from_connector.get();
    ssize_t n = ::recv(from, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) ::shutdown(to, SHUT_WR);  // pass the end on
    if (n <= 0) return;
    if (to_target && p.flips && flip_at_ >= p.forwarded && flip_at_ < p.forwarded + n)
      buf[flip_at_ - p.forwarded] ^= 1;
    if (to_target) p.forwarded += static_cast<size_t>(n);
    net::send_all(to, buf, static_cast<size_t>(n), Deadline::after(5s));
  }

  net::Fd listener_;
  const int target_;
  const size_t flip_at_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The connector's bytes before its first frame on stream 0: the handshake proof (44) and its
// hello (24 + the fabric name "test").
constexpr size_t kSetupBytes = 44 + 24 + 4;

struct Outcome {
  bool ok = false;
  std::string error;
  std::vector<uint8_t> received;
};

// Rank 0 sends 256 KiB to rank 1 through the relay (one eager frame on stream 0).
Outcome send_through_relay(bool integrity, size_t flip_at, std::vector<uint8_t>* sent) {
  auto store = make_hash_store();
  Config config;
  config.connect_timeout = 20s;
  config.get<transport::TcpSettings>().streams = 2;
  config.get<transport::TcpSettings>().integrity = integrity;
  std::unique_ptr<Fabric> f1;
  std::thread rank1([&] {
    f1 = create_tcp_fabric(test::fabric_options(1, 2, store, config, "job-secret", "test"));
  });
  const std::string address = store->get_string("test/addr/1", 10s);
  FlippingRelay relay(std::stoi(address.substr(address.rfind(':') + 1)), flip_at);
  // Rank 0 finds rank 1 at the relay.
  store->set("test/addr/1", "127.0.0.1:" + std::to_string(relay.port()));
  auto f0 = create_tcp_fabric(test::fabric_options(0, 2, store, config, "job-secret", "test"));
  rank1.join();
  auto cq0 = f0->create_cq(), cq1 = f1->create_cq();
  sent->resize(256 * 1024);
  for (size_t i = 0; i < sent->size(); ++i) (*sent)[i] = static_cast<uint8_t>(i * 13 + 1);
  Outcome out;
  out.received.assign(sent->size(), 0);
  f1->recv(0, out.received.data(), out.received.size(), 9, cq1.get(), 1);
  f0->send(1, sent->data(), sent->size(), 9, 0, cq0.get(), 2);
  Completion c;
  EXPECT_TRUE(cq1->wait(&c, 20s));
  out.ok = c.ok();
  if (c.error) out.error = c.error->what();
  return out;
}

TEST(TcpIntegrity, ARoundTripIsIntactWithNothingFlipped) {
  std::vector<uint8_t> sent;
  Outcome out = send_through_relay(true, SIZE_MAX, &sent);
  EXPECT_TRUE(out.ok) << out.error;
  EXPECT_EQ(out.received, sent);
}

TEST(TcpIntegrity, AFlippedPayloadBitFailsTheReceiveNamingThePeer) {
  std::vector<uint8_t> sent;
  Outcome out = send_through_relay(true, kSetupBytes + 56 + 16 + 1000, &sent);
  EXPECT_FALSE(out.ok);
  EXPECT_NE(out.error.find("rank 0 (stream 0): the payload of a frame failed its integrity "
                           "check (PLAIT_TCP_INTEGRITY)"),
            std::string::npos)
      << out.error;
}

TEST(TcpIntegrity, AFlippedHeaderBitIsCaughtBeforeItSteersAnything) {
  std::vector<uint8_t> sent;
  Outcome out = send_through_relay(true, kSetupBytes + 20, &sent);  // in the tag field
  EXPECT_FALSE(out.ok);
  EXPECT_NE(out.error.find("rank 0 (stream 0): a frame's header failed its integrity check"),
            std::string::npos)
      << out.error;
  EXPECT_TRUE(std::all_of(out.received.begin(), out.received.end(), [](uint8_t b) { return b == 0; }));
}

TEST(TcpIntegrity, WithoutItTheSameFlipIsASilentlyWrongResult) {
  std::vector<uint8_t> sent;
  Outcome out = send_through_relay(false, kSetupBytes + 56 + 1000, &sent);
  EXPECT_TRUE(out.ok) << out.error;
  EXPECT_NE(out.received, sent);
  size_t differing = 0;
  for (size_t i = 0; i < sent.size(); ++i) differing += out.received[i] != sent[i];
  EXPECT_EQ(differing, 1u);
}

TEST(TcpIntegrity, RanksThatDisagreeAboutItAreToldAtSetUp) {
  auto store = make_hash_store();
  Config on, off;
  on.connect_timeout = off.connect_timeout = 3s;
  on.get<transport::TcpSettings>().integrity = true;
  std::string error;
  std::thread rank1([&] {
    try {
      create_tcp_fabric(test::fabric_options(1, 2, store, on, "job-secret", "test"));
    } catch (const Error& e) {
      error += e.what();
    }
  });
  try {
    create_tcp_fabric(test::fabric_options(0, 2, store, off, "job-secret", "test"));
  } catch (const Error& e) {
    error += e.what();
  }
  rank1.join();
  EXPECT_NE(error.find("PLAIT_TCP_INTEGRITY"), std::string::npos) << error;
}

}  // namespace
}  // namespace plait::transport
