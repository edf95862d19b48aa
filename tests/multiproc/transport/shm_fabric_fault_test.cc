// The shm provider across real processes: the data paths (cross-memory attach between two
// processes, and the copy fallback), a peer killed with SIGKILL while it holds segments and
// ops are in flight (pending operations fail with kRemote naming it, nothing hangs, nothing
// is left in /dev/shm), a crash during setup, and a frozen peer at shutdown. Each test forks
// its peer first thing, while this process has no other thread; they meet through a file
// store.
#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include "core/clock.h"
#include "plait/store.h"
#include "transport/fabric.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_provider.h"
#include "transport/shm/shm_settings.h"

namespace plait::transport {
namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "shm-fault-test";

FabricOptions options_for(int rank, int size, const std::string& dir, const std::string& cma,
                          const std::string& name) {
  FabricOptions o;
  o.rank = rank;
  o.size = size;
  o.store = make_file_store(dir);
  o.name = name;
  o.job_token = kToken;
  o.config.connect_timeout = 20s;
  o.config.get<transport::ShmSettings>().cma = cma;
  return o;
}

// /dev/shm entries of the job named `name` (see segment.h for the naming).
// A fabric name of this process alone (ctest runs test cases side by side).
std::string unique_name(const std::string& base) { return base + "-" + std::to_string(::getpid()); }

std::vector<std::string> job_segments(const std::string& name) {
  std::string prefix = shm::segment_name(kToken, name, 0);
  prefix = prefix.substr(1, prefix.find('-', 7));  // "plait-<job>-"
  std::vector<std::string> found;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(e->d_name);
    ::closedir(d);
  }
  return found;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + " ";
  return s;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 11));
  return v;
}

class ShmProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/plait-shm-fault-XXXXXX";
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
  // Rank `rank` of `size` in a child process: runs `body` on its fabric (then waits to be
  // killed, or exits with `body`'s code if it returns one >= 0).
  void spawn(int rank, int size, const std::string& cma, const std::string& name,
             const std::function<int(Fabric&, Store&)>& body) {
    child_ = ::fork();
    if (child_ != 0) return;
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
    int code = 1;
    try {
      FabricOptions o = options_for(rank, size, dir_, cma, name);
      auto fabric = create_shm_fabric(o);
      code = body(*fabric, *o.store);
      if (code < 0)
        for (;;) ::pause();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "peer: %s\n", e.what());
    }
    ::_exit(code);
  }
  void kill_child(int sig) {
    ASSERT_EQ(::kill(child_, sig), 0);
    if (sig == SIGKILL) {
      ::waitpid(child_, nullptr, 0);
      child_ = -1;
    }
  }
  int wait_child() {
    int status = 0;
    ::waitpid(child_, &status, 0);
    child_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  // `phrase`: how the provider names the peer that failed, e.g. "rank 1 (pid 42) ".
  static void expect_remote_failure(const Completion& c, const std::string& phrase) {
    ASSERT_FALSE(c.ok()) << "op " << to_string(c.op) << " succeeded";
    EXPECT_EQ(c.error->category(), ErrorCategory::kRemote) << c.error->what();
    EXPECT_NE(c.error->message().find(phrase), std::string::npos) << c.error->what();
  }

  std::string dir_;
  pid_t child_ = -1;
};

// --- the data paths between two processes ---

class ShmProcessesCma : public ShmProcesses, public ::testing::WithParamInterface<std::string> {};

INSTANTIATE_TEST_SUITE_P(Cma, ShmProcessesCma, ::testing::Values("auto", "off"));

// Rank 1 echoes every message back and serves a registered region; rank 0 checks.
TEST_P(ShmProcessesCma, SendRecvRmaAndAtomicsAcrossProcesses) {
  const std::string name = unique_name("procs-" + GetParam());
  spawn(1, 2, GetParam(), name, [](Fabric& f, Store& store) {
    auto cq = f.create_cq();
    std::vector<uint64_t> region_mem(1 << 20, 0);  // 8 MiB
    auto region = f.register_memory(region_mem.data(), region_mem.size() * 8, kAccessAll);
    RemoteKey rk = region->remote_key();
    store.set("rk", Bytes(reinterpret_cast<uint8_t*>(&rk), reinterpret_cast<uint8_t*>(&rk + 1)));
    std::vector<uint8_t> buf(64 << 20);
    Completion c;
    for (;;) {
      f.recv(0, buf.data(), buf.size(), 1, cq.get(), 0);
      if (!cq->wait(&c, 30s) || !c.ok()) return 2;
      if (c.header == 0xdead) return 0;  // done: the fabric goes down in order
      f.send(0, buf.data(), c.bytes, 1, c.header, cq.get(), 0);
      if (!cq->wait(&c, 30s) || !c.ok()) return 3;
    }
  });
  auto fabric = create_shm_fabric(options_for(0, 2, dir_, GetParam(), name));
  auto cq = fabric->create_cq();
  Completion c;
  for (size_t n : {size_t{0}, size_t{1}, fabric->cost_model().eager_threshold - 1,
                   fabric->cost_model().eager_threshold, size_t{(5 << 20) + 3}, size_t{64 << 20}}) {
    auto out = pattern(n, static_cast<uint8_t>(n));
    std::vector<uint8_t> in(n + 1, 0xee);
    fabric->recv(1, in.data(), in.size(), 1, cq.get(), 1);
    fabric->send(1, out.data(), n, 1, n, cq.get(), 2);
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(cq->wait(&c, 30s));
      ASSERT_TRUE(c.ok()) << c.error->what();
      if (c.context == 1) {
        EXPECT_EQ(c.bytes, n);
        EXPECT_EQ(c.header, n);
      }
    }
    EXPECT_TRUE(std::equal(out.begin(), out.end(), in.begin())) << n << " bytes";
  }

  Bytes b = make_file_store(dir_)->get("rk", 20s);
  RemoteKey rk;
  ASSERT_EQ(b.size(), sizeof rk);
  std::memcpy(&rk, b.data(), sizeof rk);
  for (size_t n : {size_t{8}, size_t{3 << 20}}) {
    auto out = pattern(n, 3);
    fabric->write(1, out.data(), n, rk, 64, 7u, cq.get(), 3);
    ASSERT_TRUE(cq->wait(&c, 30s));
    ASSERT_TRUE(c.ok()) << c.error->what();
    std::vector<uint8_t> back(n);
    fabric->read(1, back.data(), n, rk, 64, cq.get(), 4);
    ASSERT_TRUE(cq->wait(&c, 30s));
    ASSERT_TRUE(c.ok()) << c.error->what();
    EXPECT_EQ(back, out);
  }
  uint64_t old = 1;
  fabric->fetch_add(1, &old, rk, 0, 5, cq.get(), 5);
  ASSERT_TRUE(cq->wait(&c, 30s));
  ASSERT_TRUE(c.ok()) << c.error->what();
  EXPECT_EQ(old, 0u);
  fabric->compare_swap(1, &old, rk, 0, 5, 9, cq.get(), 6);
  ASSERT_TRUE(cq->wait(&c, 30s));
  ASSERT_TRUE(c.ok()) << c.error->what();
  EXPECT_EQ(old, 5u);
  fabric->write(1, &old, 8, rk, rk.length, std::nullopt, cq.get(), 7);  // out of bounds
  ASSERT_TRUE(cq->wait(&c, 30s));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error->message().find("exceeds region"), std::string::npos) << c.error->what();

  uint64_t bye = 0;
  fabric->send(1, &bye, 8, 1, 0xdead, cq.get(), 8);
  ASSERT_TRUE(cq->wait(&c, 30s));
  EXPECT_EQ(wait_child(), 0);
  // The peer left in order: a pending receive learns it.
  fabric->recv(1, &bye, 8, 1, cq.get(), 9);
  ASSERT_TRUE(cq->wait(&c, 30s));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error->category(), ErrorCategory::kRemote);
  EXPECT_NE(c.error->message().find("rank 1 shut down its fabric"), std::string::npos)
      << c.error->what();
  fabric.reset();
  EXPECT_TRUE(job_segments(name).empty()) << joined(job_segments(name));
}

// --- failures ---

// The peer streams 32 MiB messages to us in a loop and never receives; it is killed while
// they flow. Our pending recv, our send (waiting to be pulled), our one-sided write and our
// atomic all fail with kRemote naming rank 1, and /dev/shm holds nothing of the job.
TEST_F(ShmProcesses, KilledPeerFailsPendingOpsAndLeavesNoSegments) {
  const std::string name = unique_name("killed");
  spawn(1, 2, "auto", name, [](Fabric& f, Store&) {
    auto cq = f.create_cq();
    std::vector<char> data(32 << 20, 7);
    for (;;) {
      f.send(0, data.data(), data.size(), 1, 0, cq.get(), 0);
      Completion c;
      while (!cq->wait(&c, 1s)) {
      }
      if (!c.ok()) break;
    }
    return -1;
  });
  auto fabric = create_shm_fabric(options_for(0, 2, dir_, "auto", name));
  EXPECT_TRUE(job_segments(name).empty()) << "segments outlive setup: " << joined(job_segments(name));
  auto cq = fabric->create_cq();
  std::vector<char> in(32 << 20), out(8 << 20, 1);

  Completion c;
  fabric->recv(1, in.data(), in.size(), 1, cq.get(), 1);
  ASSERT_TRUE(cq->wait(&c, 20s));
  ASSERT_TRUE(c.ok()) << c.error->what();  // the pair works

  fabric->send(1, out.data(), out.size(), 2, 0, cq.get(), 2);  // never received
  fabric->recv(1, in.data(), in.size(), 1, cq.get(), 3);
  // Whichever op notices first ("died without shutting down", "is gone: process_vm_readv
  // failed"), the peer is named by rank and pid.
  const std::string dead_peer = "rank 1 (pid " + std::to_string(child_) + ") ";
  kill_child(SIGKILL);
  RemoteKey nowhere{0, 1 << 20, 0x1234};
  fabric->write(1, out.data(), out.size(), nowhere, 0, std::nullopt, cq.get(), 4);
  uint64_t old = 0;
  fabric->fetch_add(1, &old, nowhere, 0, 1, cq.get(), 5);

  std::set<uint64_t> failed;
  for (int pending = 4; pending > 0;) {
    ASSERT_TRUE(cq->wait(&c, 10s)) << "a pending op did not complete after the peer died";
    if (c.context == 3 && c.ok()) {  // that message made it before the kill: try another
      fabric->recv(1, in.data(), in.size(), 1, cq.get(), 3);
      continue;
    }
    expect_remote_failure(c, dead_peer);
    failed.insert(c.context);
    --pending;
  }
  EXPECT_EQ(failed, (std::set<uint64_t>{2, 3, 4, 5}));
  EXPECT_TRUE(fabric->peer_failed(1));

  // Later ops fail at once, and destruction does not wait for the dead peer.
  fabric->recv(1, in.data(), 8, 9, cq.get(), 6);
  ASSERT_TRUE(cq->wait(&c, 10s));
  expect_remote_failure(c, dead_peer);
  fabric.reset();
  EXPECT_TRUE(job_segments(name).empty()) << joined(job_segments(name));
}

// A peer killed during setup (after creating its segment, before everyone attached): our
// setup fails naming it and removes its segment, which it can no longer remove itself.
TEST_F(ShmProcesses, PeerKilledDuringSetupLeavesNothingBehind) {
  const std::string name = unique_name("setup-crash");
  spawn(1, 3, "auto", name, [](Fabric&, Store&) { return 0; });  // rank 2 never comes
  auto store = make_file_store(dir_);
  store->wait({name + "/shm/segment/1"}, 20s);  // its segment exists now
  ASSERT_FALSE(job_segments(name).empty());
  kill_child(SIGKILL);
  FabricOptions o = options_for(0, 3, dir_, "auto", name);
  o.config.connect_timeout = 2s;
  try {
    create_shm_fabric(o);
    ADD_FAILURE() << "setup succeeded without rank 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kRemote) << e.what();
    EXPECT_NE(std::string(e.what()).find("setup with peer 1: rank 1's shm segment "),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(job_segments(name).empty()) << joined(job_segments(name));
}

// A segment whose creator died with nobody to notice (setup never got far) is swept by the
// next setup of any plait job on the host.
TEST_F(ShmProcesses, StaleSegmentsOfDeadCreatorsAreSwept) {
  const std::string name = unique_name("stale");
  spawn(1, 2, "auto", name, [](Fabric&, Store&) { return 0; });  // rank 0 never comes
  make_file_store(dir_)->wait({name + "/shm/segment/1"}, 20s);
  kill_child(SIGKILL);
  // (A setup running concurrently elsewhere on the host may sweep it first: same outcome.)
  if (job_segments(name).empty()) GTEST_SKIP() << "swept by a concurrent setup already";
  FabricOptions o = options_for(0, 1, dir_, "auto", "another-job");
  create_shm_fabric(o).reset();
  EXPECT_TRUE(job_segments(name).empty()) << joined(job_segments(name));
}

// A frozen peer (SIGSTOP) never drains anything: destruction still returns, and so does a
// deregistration of a region it could have been accessing.
TEST_F(ShmProcesses, DestructionDoesNotWaitForAFrozenPeer) {
  spawn(1, 2, "auto", "frozen", [](Fabric&, Store&) { return -1; });
  auto fabric = create_shm_fabric(options_for(0, 2, dir_, "auto", "frozen"));
  auto cq = fabric->create_cq();
  std::vector<char> out(4 << 20, 1), mem(4096);
  fabric->send(1, out.data(), out.size(), 1, 0, cq.get(), 0);  // left pending
  auto region = fabric->register_memory(mem.data(), mem.size(), kAccessAll);
  kill_child(SIGSTOP);
  auto start = Clock::now();
  region.reset();
  fabric.reset();
  EXPECT_LT(seconds_since(start), 15.0) << "the destructor waited on a frozen peer";
}

}  // namespace
}  // namespace plait::transport
