// The TCP provider against a peer process that dies or freezes: pending operations must fail
// with kRemote naming the peer, and nothing may hang. Each test forks its peer first thing,
// while this process has no other thread; the two meet through a file store.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <regex>
#include <string>
#include <thread>

#include "core/clock.h"
#include "plait/store.h"
#include "transport/fabric.h"
#include "transport/tcp/tcp_provider.h"
#include "transport/tcp/tcp_settings.h"

namespace plait::transport {
namespace {

using namespace std::chrono_literals;

constexpr size_t kChunk = 32 << 20;

FabricOptions options_for(int rank, const std::string& dir) {
  FabricOptions o;
  o.rank = rank;
  o.size = 2;
  o.store = make_file_store(dir);
  o.name = "fault";
  o.job_token = "fault-test";
  o.config.connect_timeout = 20s;
  o.config.get<transport::TcpSettings>().streams = 2;
  return o;
}

// Rank 1 in a child process: runs `body` on its fabric, then waits to be killed.
pid_t spawn_peer(const std::string& dir, const std::function<void(Fabric&)>& body) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
  try {
    auto fabric = create_tcp_fabric(options_for(1, dir));
    body(*fabric);
    for (;;) ::pause();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "peer: %s\n", e.what());
  }
  ::_exit(1);
}

class TcpFabricFault : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/plait-tcp-fault-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }
  void kill_child(int sig) {
    ASSERT_EQ(::kill(child_, sig), 0);
    if (sig == SIGKILL) {
      ::waitpid(child_, nullptr, 0);
      child_ = -1;
    }
  }
  // A killed peer's sockets close or reset, depending on what was in flight; either way the
  // error names rank 1 and the stream.
  static void expect_remote_failure(const Completion& c) {
    ASSERT_FALSE(c.ok()) << "op " << to_string(c.op) << " succeeded";
    EXPECT_EQ(c.error->category(), ErrorCategory::kRemote) << c.error->what();
    static const std::regex names_rank_1(
        "connection to rank 1 \\(stream [0-9]+\\) failed: |"
        "rank 1 closed the connection \\(stream [0-9]+\\) without a goodbye");
    EXPECT_TRUE(std::regex_search(c.error->message(), names_rank_1)) << c.error->what();
  }

  std::string dir_;
  pid_t child_ = -1;
};

// The peer streams 32 MiB messages to us in a loop and never receives; it is killed while a
// message is on the wire. Our pending recv, our send (waiting for a clear-to-send) and our
// one-sided write all fail with kRemote naming rank 1.
TEST_F(TcpFabricFault, KilledPeerFailsPendingOpsWithoutHanging) {
  child_ = spawn_peer(dir_, [](Fabric& f) {
    auto cq = f.create_cq();
    std::vector<char> data(kChunk, 7);
    for (;;) {
      f.send(0, data.data(), data.size(), 1, 0, cq.get(), 0);
      Completion c;
      while (!cq->wait(&c, 1s)) {
      }
      if (!c.ok()) break;
    }
  });
  auto fabric = create_tcp_fabric(options_for(0, dir_));
  auto cq = fabric->create_cq();
  std::vector<char> in(kChunk), out(8 << 20, 1);

  Completion c;
  fabric->recv(1, in.data(), in.size(), 1, cq.get(), 1);
  ASSERT_TRUE(cq->wait(&c, 20s));
  ASSERT_TRUE(c.ok()) << c.error->what();  // the pair works

  fabric->send(1, out.data(), out.size(), 2, 0, cq.get(), 2);  // never received
  RemoteKey nowhere{0, 1 << 20, 0x1234};
  fabric->recv(1, in.data(), in.size(), 1, cq.get(), 3);
  std::this_thread::sleep_for(5ms);  // let the next message get under way
  kill_child(SIGKILL);
  fabric->write(1, out.data(), out.size(), nowhere, 0, std::nullopt, cq.get(), 4);

  bool send_failed = false, write_failed = false;
  for (int pending = 3; pending > 0;) {
    ASSERT_TRUE(cq->wait(&c, 10s)) << "a pending op did not complete after the peer died";
    if (c.context == 3 && c.ok()) {  // that message made it before the kill: try another
      fabric->recv(1, in.data(), in.size(), 1, cq.get(), 3);
      continue;
    }
    expect_remote_failure(c);
    send_failed |= c.context == 2;
    write_failed |= c.context == 4;
    --pending;
  }
  EXPECT_TRUE(send_failed && write_failed);
  EXPECT_TRUE(fabric->peer_failed(1));

  // Later ops fail at once, and destruction does not wait for the dead peer.
  fabric->recv(1, in.data(), 8, 9, cq.get(), 5);
  ASSERT_TRUE(cq->wait(&c, 10s));
  expect_remote_failure(c);
  fabric.reset();
}

// A frozen peer (SIGSTOP) never answers our goodbye: destruction still returns.
TEST_F(TcpFabricFault, DestructionDoesNotWaitForAFrozenPeer) {
  child_ = spawn_peer(dir_, [](Fabric&) {});
  auto fabric = create_tcp_fabric(options_for(0, dir_));
  auto cq = fabric->create_cq();
  std::vector<char> out(4 << 20, 1);
  fabric->send(1, out.data(), out.size(), 1, 0, cq.get(), 0);  // left pending
  kill_child(SIGSTOP);
  auto start = Clock::now();
  fabric.reset();
  EXPECT_LT(seconds_since(start), 15.0) << "the destructor waited on a frozen peer";
}

// A peer that exits without destroying its fabric (no goodbye) is a failure, not a
// shutdown: the pending recv says so.
TEST_F(TcpFabricFault, PeerExitWithoutGoodbyeIsReported) {
  child_ = spawn_peer(dir_, [](Fabric& f) {
    auto cq = f.create_cq();
    char byte = 1;
    f.send(0, &byte, 1, 1, 0, cq.get(), 0);
    Completion c;
    cq->wait(&c, 10s);
    ::_exit(0);  // sockets close with the process, the fabric never says goodbye
  });
  auto fabric = create_tcp_fabric(options_for(0, dir_));
  auto cq = fabric->create_cq();
  char byte = 0;
  Completion c;
  fabric->recv(1, &byte, 1, 1, cq.get(), 0);
  ASSERT_TRUE(cq->wait(&c, 20s));
  ASSERT_TRUE(c.ok());
  fabric->recv(1, &byte, 1, 2, cq.get(), 1);
  ASSERT_TRUE(cq->wait(&c, 20s));
  expect_remote_failure(c);
  // A clean close, or a reset when the exiting process had unread bytes (a keep-alive that
  // arrived meanwhile): either way a failure naming the peer, not its goodbye.
  const std::string m = c.error->message();
  EXPECT_TRUE(m.find("rank 1 closed the connection (stream ") != std::string::npos ||
              m.find("connection to rank 1 (stream 0) failed: connection reset") != std::string::npos)
      << c.error->what();
}

}  // namespace
}  // namespace plait::transport
