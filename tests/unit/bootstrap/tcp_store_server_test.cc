// What the embedded TCP store server bounds, whatever its clients do: the connections it
// authenticates at once (PLAIT_STORE_MAX_HANDSHAKES, one thread each), and every buffer whose
// size a peer announces on the wire. The Store contract itself is tested in store_test.cc.
#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/store_handshakes.h"
#include "bootstrap/store_protocol.h"
#include "core/auth.h"
#include "core/socket.h"
#include "plait/error.h"
#include "plait/store.h"

namespace plait {
namespace {

using namespace std::chrono_literals;

// The server's handshake threads, by the name they give themselves.
int handshake_threads() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string name;
      if (std::getline(comm, name) && name == StoreHandshakes::kThreadName) ++n;
    }
    ::closedir(d);
  }
  return n;
}

// Connections waiting in the accept queue of the listening socket 127.0.0.1:port: for a
// listener, /proc/net/tcp's rx_queue column is that queue's length.
int accept_queue_length(int port) {
  char local[32];
  std::snprintf(local, sizeof local, "0100007F:%04X", port);
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local_address, remote_address, state, queues;
    fields >> slot >> local_address >> remote_address >> state >> queues;
    if (local_address == local && state == "0A")  // TCP_LISTEN
      return static_cast<int>(std::stoul(queues.substr(queues.find(':') + 1), nullptr, 16));
  }
  ADD_FAILURE() << "no listening socket on " << local << " in /proc/net/tcp";
  return -1;
}

// Polls `condition` until it holds or `limit` passes; the limit only bounds a failure.
template <typename Condition>
bool eventually(Condition condition, std::chrono::seconds limit = 20s) {
  const Deadline deadline = Deadline::after(limit);
  while (!condition()) {
    if (deadline.expired()) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(TcpStoreServer, HandshakesAtOnceAreBoundedAndLaterClientsWaitTheirTurn) {
  constexpr int kLimit = 2, kIdle = 5;
  TcpStoreServer server("127.0.0.1", 0, "token", kLimit);
  auto first = connect_tcp_store("127.0.0.1", server.port(), "token", 5s);

  // Clients that connect and never say a word: each holds a handshake until it gives up.
  std::vector<net::Fd> idle;
  for (int i = 0; i < kIdle; ++i)
    idle.push_back(net::connect_tcp("127.0.0.1", server.port(), Deadline::after(5s)));
  // Every one of them is established: accepted (a handshake thread) or still queued.
  ASSERT_TRUE(eventually([&] {
    return handshake_threads() + accept_queue_length(server.port()) == kIdle;
  })) << handshake_threads() << " handshake threads, " << accept_queue_length(server.port())
      << " queued";
  // Two round trips: the second request is read in a later pass of the server's loop than
  // the one that saw the queued connections, so whatever it would accept, it has.
  EXPECT_FALSE(first->check("a"));
  EXPECT_FALSE(first->check("b"));
  EXPECT_EQ(handshake_threads(), kLimit);
  EXPECT_EQ(accept_queue_length(server.port()), kIdle - kLimit);

  // Once they hang up, their handshakes fail, the queue drains, and a real client gets in.
  idle.clear();
  auto late = connect_tcp_store("127.0.0.1", server.port(), "token", 20s);
  late->set("k", "v");
  EXPECT_EQ(first->get_string("k", 5s), "v");
  EXPECT_TRUE(eventually([&] { return handshake_threads() == 0; }))
      << handshake_threads() << " handshake threads left";
}

TEST(TcpStoreServer, TheLimitComesFromTheEnvironmentByDefault) {
  ::setenv("PLAIT_STORE_MAX_HANDSHAKES", "0", 1);
  try {
    TcpStoreServer server("127.0.0.1", 0, "token");
    ADD_FAILURE() << "a server started with PLAIT_STORE_MAX_HANDSHAKES=0";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage) << e.what();
    EXPECT_NE(std::string(e.what()).find("PLAIT_STORE_MAX_HANDSHAKES='0' is not valid"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("PLAIT_STORE_MAX_HANDSHAKES");
}

// An authenticated raw connection, to speak the wire format directly.
net::Fd raw_client(int port) {
  net::Fd fd = net::connect_tcp("127.0.0.1", port, Deadline::after(5s));
  auth::connect_handshake(fd.get(), "token", store_wire::kAuthLabel, Deadline::after(5s));
  return fd;
}

TEST(TcpStoreServer, AnOversizedFrameLengthIsRefusedNamingIt) {
  TcpStoreServer server("127.0.0.1", 0, "token");
  net::Fd fd = raw_client(server.port());
  // Announces a body one byte over the limit, and sends none of it.
  const uint32_t announced = store_wire::kMaxFrameBytes + 1;
  const uint8_t header[4] = {uint8_t(announced >> 24), uint8_t(announced >> 16),
                             uint8_t(announced >> 8), uint8_t(announced)};
  net::send_all(fd.get(), header, sizeof header, Deadline::after(5s));

  uint8_t reply_header[4];
  net::recv_all(fd.get(), reply_header, sizeof reply_header, Deadline::after(10s));
  const uint32_t len = store_wire::read_frame_length(reply_header);
  ASSERT_LE(len, 4096u);
  std::vector<uint8_t> body(len);
  net::recv_all(fd.get(), body.data(), body.size(), Deadline::after(10s));
  store_wire::Reader reader(body.data(), body.size());
  EXPECT_EQ(reader.u8(), uint8_t(store_wire::Status::kError));
  EXPECT_EQ(reader.str(), "a frame of " + std::to_string(announced) +
                              " bytes is over the limit of " +
                              std::to_string(store_wire::kMaxFrameBytes) +
                              " bytes; closing the connection");
  // Then the server hangs up: the rest of such a stream could not be parsed anyway.
  uint8_t byte;
  EXPECT_THROW(net::recv_all(fd.get(), &byte, 1, Deadline::after(10s)), Error);
  // And it still serves everyone else.
  auto client = connect_tcp_store("127.0.0.1", server.port(), "token", 5s);
  client->set("k", "v");
  EXPECT_EQ(client->get_string("k", 1s), "v");
}

// Empty keys cost 4 bytes of frame each but a whole std::string to the reader: a WAIT of
// 60 million of them (240 MiB, under the frame limit) made the server allocate 2 GiB before
// the key count was bounded. Two million are enough to cross the bound.
TEST(TcpStoreServer, AWaitOnTooManyKeysIsRefusedBeforeTheyAreAllocated) {
  std::vector<uint8_t> body{uint8_t(store_wire::Op::kWait), 0, 0, 0, 0, 0, 0, 0, 1};
  const uint32_t n = 2'000'000;
  for (int shift = 24; shift >= 0; shift -= 8) body.push_back(uint8_t(n >> shift));
  body.resize(body.size() + size_t(n) * 4, 0);
  try {
    store_wire::decode_request(body.data(), body.size());
    ADD_FAILURE() << "a WAIT on " << n << " keys was decoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    EXPECT_NE(std::string(e.what()).find("2000000 keys, over the limit of 1048576"),
              std::string::npos)
        << e.what();
  }
  // A client refuses to send one, naming the count.
  TcpStoreServer server("127.0.0.1", 0, "token");
  auto client = connect_tcp_store("127.0.0.1", server.port(), "token", 5s);
  std::vector<std::string> keys(store_wire::kMaxKeys + 1, "k");
  try {
    client->wait(keys, 1s);
    ADD_FAILURE() << "a wait on " << keys.size() << " keys was sent";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("store wait on 1048577 keys is over the limit"),
              std::string::npos)
        << e.what();
  }
  client->set("k", "v");  // the connection is still in step
  EXPECT_EQ(client->get_string("k", 1s), "v");
}

TEST(TcpStoreServer, AClientRefusesAnOversizedReplyLengthNamingIt) {
  // A server that authenticates its client, reads one request and answers with a length
  // over the limit.
  net::Fd listener = net::listen_tcp("127.0.0.1", 0);
  const int port = net::local_port(listener.get());
  std::thread fake([&] {
    net::Fd conn = net::accept_tcp(listener.get(), Deadline::after(10s));
    if (!conn.valid()) return;
    try {
      auth::accept_handshake(conn.get(), "token", store_wire::kAuthLabel, Deadline::after(10s));
      uint8_t header[4];
      net::recv_all(conn.get(), header, sizeof header, Deadline::after(10s));
      std::vector<uint8_t> request(store_wire::read_frame_length(header));
      net::recv_all(conn.get(), request.data(), request.size(), Deadline::after(10s));
      const uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
      net::send_all(conn.get(), huge, sizeof huge, Deadline::after(10s));
      uint8_t byte;
      net::recv_all(conn.get(), &byte, 1, Deadline::after(10s));  // until the client hangs up
    } catch (const Error&) {
    }
  });
  auto client = connect_tcp_store("127.0.0.1", port, "token", 5s);
  try {
    client->check("k");
    ADD_FAILURE() << "a reply of 4 GiB was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kRemote) << e.what();
    EXPECT_NE(std::string(e.what()).find("a reply frame of 4294967295 bytes is over the limit of " +
                                         std::to_string(store_wire::kMaxFrameBytes) + " bytes"),
              std::string::npos)
        << e.what();
  }
  client.reset();
  fake.join();
}

}  // namespace
}  // namespace plait
