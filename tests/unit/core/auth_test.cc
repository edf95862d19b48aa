#include "core/auth.h"

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <thread>

#include "core/socket.h"
#include "plait/error.h"

namespace plait {
namespace {

using namespace std::chrono_literals;

// A connected TCP pair on loopback: auth reads the peer address with getpeername.
struct TcpPair {
  net::Fd accepted;
  net::Fd connected;
};

TcpPair make_pair() {
  net::Fd listener = net::listen_tcp("127.0.0.1", 0);
  int port = net::local_port(listener.get());
  TcpPair pair;
  pair.connected = net::connect_tcp("127.0.0.1", port, Deadline::after(5s));
  pair.accepted = net::accept_tcp(listener.get(), Deadline::after(5s));
  EXPECT_TRUE(pair.accepted.valid());
  return pair;
}

// Runs the acceptor on a thread, the connector here; returns both sides' errors ("" = ok).
struct Outcome {
  std::string acceptor_error;
  std::string connector_error;
};

Outcome handshake(const std::string& acceptor_token, const std::string& connector_token,
                  const std::string& acceptor_label = "store",
                  const std::string& connector_label = "store") {
  TcpPair pair = make_pair();
  auto acceptor = std::async(std::launch::async, [&] {
    try {
      auth::accept_handshake(pair.accepted.get(), acceptor_token, acceptor_label,
                             Deadline::after(5s));
      return std::string();
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage) << e.what();
      return std::string(e.what());
    }
  });
  Outcome out;
  try {
    auth::connect_handshake(pair.connected.get(), connector_token, connector_label,
                            Deadline::after(5s));
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage) << e.what();
    out.connector_error = e.what();
  }
  out.acceptor_error = acceptor.get();
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Auth, SameTokenIsAcceptedOnBothSides) {
  Outcome out = handshake("secret-token", "secret-token");
  EXPECT_EQ(out.acceptor_error, "");
  EXPECT_EQ(out.connector_error, "");
}

TEST(Auth, EmptyTokensStillMatch) {
  Outcome out = handshake("", "");
  EXPECT_EQ(out.acceptor_error, "");
  EXPECT_EQ(out.connector_error, "");
}

TEST(Auth, WrongTokenFailsBothSidesWithClearMessages) {
  Outcome out = handshake("job-a", "job-b");
  EXPECT_TRUE(
      contains(out.acceptor_error, "job token mismatch on store connection from 127.0.0.1:"))
      << out.acceptor_error;
  EXPECT_TRUE(contains(out.connector_error, "job token rejected by store at 127.0.0.1:"))
      << out.connector_error;
}

TEST(Auth, EmptyTokenDoesNotMatchANonEmptyOne) {
  Outcome out = handshake("job-a", "");
  EXPECT_TRUE(contains(out.acceptor_error, "job token mismatch")) << out.acceptor_error;
  EXPECT_TRUE(contains(out.connector_error, "job token rejected")) << out.connector_error;
}

TEST(Auth, LabelIsPartOfTheProof) {
  // A proof made for one service must not open another one with the same token.
  Outcome out = handshake("token", "token", "store", "tcp transport");
  EXPECT_TRUE(contains(out.acceptor_error, "job token mismatch")) << out.acceptor_error;
  EXPECT_FALSE(out.connector_error.empty());
}

TEST(Auth, GarbagePeerIsRefusedNotTrusted) {
  TcpPair pair = make_pair();
  std::string junk(64, 'x');
  net::send_all(pair.connected.get(), junk.data(), junk.size(), Deadline::after(5s));
  try {
    auth::accept_handshake(pair.accepted.get(), "token", "store", Deadline::after(5s));
    FAIL() << "a garbage proof was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    EXPECT_TRUE(contains(e.what(), "not a plait process")) << e.what();
  }
}

TEST(Auth, SilentPeerTimesOutInsteadOfHanging) {
  TcpPair pair = make_pair();
  try {
    auth::accept_handshake(pair.accepted.get(), "token", "store", Deadline::after(100ms));
    FAIL() << "handshake with a silent peer returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout) << e.what();
    EXPECT_TRUE(
        contains(e.what(), "Timed out waiting for proof in the store handshake with 127.0.0.1:"))
        << e.what();
  }
}

TEST(Auth, PeerThatClosesIsARemoteError) {
  TcpPair pair = make_pair();
  pair.connected.reset();
  try {
    auth::accept_handshake(pair.accepted.get(), "token", "store", Deadline::after(5s));
    FAIL() << "handshake with a closed peer returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kRemote) << e.what();
  }
}

TEST(Auth, ConnectorRefusesANonPlaitServer) {
  TcpPair pair = make_pair();
  std::string banner = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n" + std::string(20, ' ');
  net::send_all(pair.accepted.get(), banner.data(), banner.size(), Deadline::after(5s));
  try {
    auth::connect_handshake(pair.connected.get(), "token", "store", Deadline::after(5s));
    FAIL() << "handshake with a non-plait server returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    EXPECT_TRUE(contains(e.what(), "is not a plait endpoint")) << e.what();
  }
}

TEST(Auth, RandomTokensAreLongHexAndDistinct) {
  std::string a = auth::random_token();
  std::string b = auth::random_token();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace plait
