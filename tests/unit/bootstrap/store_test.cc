// The Store contract, run against every implementation (in-process, file, TCP, and a
// PrefixStore over each), then what is specific to the TCP and file stores.
#include "plait/store.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "core/auth.h"
#include "core/socket.h"
#include "plait/error.h"

namespace plait {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A scratch directory removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "plait-store-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
    EXPECT_FALSE(path_.empty());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One store's data, and a way to open another handle onto it: another client of the same
// server, another FileStore on the same directory. Threads that must make progress on their
// own need their own handle (a TCP client serialises its requests).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::shared_ptr<Store> open() = 0;
};

class HashBackend : public Backend {
 public:
  std::shared_ptr<Store> open() override { return store_; }

 private:
  std::shared_ptr<Store> store_ = make_hash_store();
};

class FileBackend : public Backend {
 public:
  std::shared_ptr<Store> open() override { return make_file_store(dir_.path() + "/store"); }

 private:
  TempDir dir_;
};

class TcpBackend : public Backend {
 public:
  std::shared_ptr<Store> open() override {
    return connect_tcp_store("127.0.0.1", server_.port(), "token", 5s);
  }

 private:
  TcpStoreServer server_{"127.0.0.1", 0, "token"};
};

class PrefixBackend : public Backend {
 public:
  explicit PrefixBackend(std::unique_ptr<Backend> base) : base_(std::move(base)) {}
  std::shared_ptr<Store> open() override {
    return std::make_shared<PrefixStore>("job", base_->open());
  }

 private:
  std::unique_ptr<Backend> base_;
};

struct Kind {
  std::string name;
  std::function<std::unique_ptr<Backend>()> make;
};

const Kind kKinds[] = {
    {"Hash", [] { return std::make_unique<HashBackend>(); }},
    {"File", [] { return std::make_unique<FileBackend>(); }},
    {"Tcp", [] { return std::make_unique<TcpBackend>(); }},
    {"PrefixOverHash",
     [] { return std::make_unique<PrefixBackend>(std::make_unique<HashBackend>()); }},
    {"PrefixOverTcp",
     [] { return std::make_unique<PrefixBackend>(std::make_unique<TcpBackend>()); }},
};

class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    backend_ = GetParam().make();
    store_ = backend_->open();
  }
  bool is_hash() const { return GetParam().name == "Hash" || GetParam().name == "PrefixOverHash"; }

  std::unique_ptr<Backend> backend_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreTest, SetThenGetAndOverwrite) {
  store_->set("a", "1");
  EXPECT_EQ(store_->get_string("a", 1s), "1");
  store_->set("a", "two");
  EXPECT_EQ(store_->get_string("a", 1s), "two");
  EXPECT_EQ(backend_->open()->get_string("a", 0ms), "two");
}

TEST_P(StoreTest, GetBlocksUntilAnotherThreadSets) {
  auto writer_store = backend_->open();
  std::thread writer([&] {
    std::this_thread::sleep_for(30ms);
    writer_store->set("late", "here");
  });
  EXPECT_EQ(store_->get_string("late", 10s), "here");
  writer.join();
}

TEST_P(StoreTest, GetTimeoutNamesTheKey) {
  try {
    store_->get("never-set", 20ms);
    FAIL() << "get of a missing key returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_TRUE(contains(e.what(), "never-set")) << e.what();
  }
}

TEST_P(StoreTest, WaitReturnsOnceEveryKeyExists) {
  auto writer_store = backend_->open();
  std::thread writer([&] {
    writer_store->set("w1", "x");
    std::this_thread::sleep_for(20ms);
    writer_store->set("w2", "y");
  });
  store_->wait({"w1", "w2"}, 10s);
  writer.join();
  store_->wait({"w1", "w2"}, 0ms);
}

TEST_P(StoreTest, WaitTimeoutNamesTheMissingKey) {
  store_->set("present", "1");
  try {
    store_->wait({"present", "absent"}, 20ms);
    FAIL() << "wait for a missing key returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_TRUE(contains(e.what(), "'absent'") || contains(e.what(), "/absent'")) << e.what();
  }
}

TEST_P(StoreTest, AddReturnsTheNewValueStoredAsDecimalText) {
  EXPECT_EQ(store_->add("n", 5), 5);
  EXPECT_EQ(store_->add("n", -7), -2);
  EXPECT_EQ(store_->get_string("n", 1s), "-2");
  EXPECT_EQ(store_->add("n", 0), -2);
  store_->set("m", "40");
  EXPECT_EQ(store_->add("m", 2), 42);
}

TEST_P(StoreTest, AddFromManyThreadsIsAtomic) {
  constexpr int kThreads = 6;
  constexpr int kAdds = 40;
  std::mutex mu;
  std::set<int64_t> seen;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, handle = backend_->open()] {
      for (int i = 0; i < kAdds; ++i) {
        int64_t v = handle->add("counter", 1);
        std::lock_guard lock(mu);
        seen.insert(v);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store_->get_string("counter", 1s), std::to_string(kThreads * kAdds));
  EXPECT_EQ(seen.size(), size_t(kThreads * kAdds));  // every add saw a distinct value
}

TEST_P(StoreTest, AddOnANonIntegerIsRefused) {
  store_->set("text", "abc");
  try {
    store_->add("text", 1);
    FAIL() << "add on a non-integer value returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    EXPECT_TRUE(contains(e.what(), "text'")) << e.what();
  }
  EXPECT_EQ(store_->get_string("text", 1s), "abc");
  EXPECT_EQ(store_->add("after", 1), 1);  // the store still serves
}

TEST_P(StoreTest, CheckNeverBlocks) {
  EXPECT_FALSE(store_->check("c"));
  store_->set("c", "");
  EXPECT_TRUE(store_->check("c"));
  EXPECT_EQ(store_->get("c", 1s), Bytes{});
}

TEST_P(StoreTest, BinaryValuesAndOddKeysRoundTrip) {
  Bytes binary = {0, 1, 0, 255, '\n', 0, 42};
  std::string odd_key = std::string("a/b c.%\0z", 9);
  store_->set(odd_key, binary);
  EXPECT_EQ(store_->get(odd_key, 1s), binary);
  EXPECT_FALSE(store_->check("a/b c.%"));

  Bytes big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 31 + 7);
  store_->set("big", big);
  EXPECT_EQ(backend_->open()->get("big", 5s), big);
}

TEST_P(StoreTest, PrefixStoresDoNotSeeEachOthersKeys) {
  PrefixStore a("a", store_);
  PrefixStore b("b", store_);
  a.set("k", "from-a");
  EXPECT_FALSE(b.check("k"));
  EXPECT_TRUE(store_->check("a/k"));
  EXPECT_EQ(store_->get_string("a/k", 1s), "from-a");
  b.set("k", "from-b");
  EXPECT_EQ(a.get_string("k", 1s), "from-a");
  EXPECT_EQ(b.get_string("k", 1s), "from-b");
  EXPECT_EQ(a.add("n", 1), 1);
  EXPECT_EQ(b.add("n", 1), 1);
  EXPECT_THROW(b.wait({"only-in-a"}, 10ms), Error);
}

INSTANTIATE_TEST_SUITE_P(Store, StoreTest, ::testing::ValuesIn(kKinds),
                         [](const auto& info) { return info.param.name; });

// ---- TCP store ----

TEST(TcpStore, WrongTokenIsRefusedWhileAGoodClientKeepsWorking) {
  TcpStoreServer server("127.0.0.1", 0, "right");
  auto good = connect_tcp_store("127.0.0.1", server.port(), "right", 5s);
  good->set("k", "v");
  try {
    connect_tcp_store("127.0.0.1", server.port(), "wrong", 5s);
    FAIL() << "a client with the wrong token connected";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    EXPECT_TRUE(contains(e.what(), "job token rejected by store")) << e.what();
  }
  EXPECT_EQ(good->get_string("k", 1s), "v");
  EXPECT_EQ(good->add("n", 3), 3);
}

TEST(TcpStore, SilentAndGarbageConnectionsDoNotStallOthers) {
  TcpStoreServer server("127.0.0.1", 0, "token");
  // One says nothing (its handshake waits), one sends junk (refused); neither may hold up a
  // real client.
  net::Fd silent = net::connect_tcp("127.0.0.1", server.port(), Deadline::after(5s));
  net::Fd junk = net::connect_tcp("127.0.0.1", server.port(), Deadline::after(5s));
  std::string garbage(100, 'G');
  net::send_all(junk.get(), garbage.data(), garbage.size(), Deadline::after(5s));
  auto client = connect_tcp_store("127.0.0.1", server.port(), "token", 5s);
  client->set("k", "v");
  EXPECT_EQ(client->get_string("k", 1s), "v");
}

TEST(TcpStore, ServerDestroyedWhileAClientWaitsFailsTheClientPromptly) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "token");
  int port = server->port();
  auto client = connect_tcp_store("127.0.0.1", port, "token", 5s);
  auto waiter = std::async(std::launch::async, [&] { client->get("never", 60s); });
  // Let the request reach the server (either order ends in a remote error).
  std::this_thread::sleep_for(50ms);
  server.reset();
  ASSERT_EQ(waiter.wait_for(20s), std::future_status::ready) << "client hung after server died";
  try {
    waiter.get();
    FAIL() << "get returned after the server died";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kRemote) << e.what();
    EXPECT_TRUE(contains(e.what(), "store at 127.0.0.1:" + std::to_string(port))) << e.what();
  }
  // The connection is known to be dead: later calls fail at once instead of misreading.
  EXPECT_THROW(client->check("k"), Error);
}

TEST(TcpStore, ClosedConnectionSaysSo) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "token");
  int port = server->port();
  auto client = connect_tcp_store("127.0.0.1", port, "token", 5s);
  client->set("k", "v");
  server.reset();
  try {
    client->get("k", 1s);
    FAIL() << "get returned after the server died";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kRemote) << e.what();
    EXPECT_TRUE(contains(e.what(),
                         "store at 127.0.0.1:" + std::to_string(port) + " closed the connection") ||
                contains(e.what(), "reset"))
        << e.what();
  }
}

TEST(TcpStore, HungServerTimesOutTheClient) {
  // A server that authenticates clients and then never answers.
  net::Fd listener = net::listen_tcp("127.0.0.1", 0);
  int port = net::local_port(listener.get());
  std::promise<void> done;
  std::thread fake([&] {
    net::Fd conn = net::accept_tcp(listener.get(), Deadline::after(5s));
    if (!conn.valid()) return;
    try {
      auth::accept_handshake(conn.get(), "token", "store", Deadline::after(5s));
    } catch (const Error&) {
      return;
    }
    done.get_future().wait_for(10s);
  });
  try {
    auto client = connect_tcp_store("127.0.0.1", port, "token", 200ms);
    client->set("k", "v");
    ADD_FAILURE() << "set on a hung server returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout) << e.what();
    EXPECT_TRUE(contains(e.what(), "to answer about 'k'")) << e.what();
  }
  done.set_value();
  fake.join();
}

TEST(TcpStore, ClientWaitsForAServerThatStartsLater) {
  int port;
  {
    TcpStoreServer probe("127.0.0.1", 0, "token");  // find a free port, then free it
    port = probe.port();
  }
  auto client = std::async(std::launch::async,
                           [&] { return connect_tcp_store("127.0.0.1", port, "token", 10s); });
  std::this_thread::sleep_for(50ms);
  TcpStoreServer server("127.0.0.1", port, "token");
  auto store = client.get();
  store->set("k", "v");
  EXPECT_EQ(store->get_string("k", 1s), "v");
}

TEST(TcpStore, ConnectTimeoutNamesTheAddress) {
  int port;
  {
    TcpStoreServer probe("127.0.0.1", 0, "token");
    port = probe.port();
  }
  try {
    connect_tcp_store("127.0.0.1", port, "token", 50ms);
    FAIL() << "connected to nothing";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout) << e.what();
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(port))) << e.what();
  }
}

TEST(TcpStore, ManyConcurrentClientsRendezvous) {
  constexpr int kClients = 32;
  TcpStoreServer server("127.0.0.1", 0, "token");
  std::atomic<int> failures{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kClients; ++r) {
    ranks.emplace_back([&, r] {
      try {
        auto store = connect_tcp_store("127.0.0.1", server.port(), "token", 10s);
        store->set("addr/" + std::to_string(r), "rank" + std::to_string(r));
        store->add("arrived", 1);
        std::vector<std::string> all;
        for (int i = 0; i < kClients; ++i) all.push_back("addr/" + std::to_string(i));
        store->wait(all, 10s);
        int peer = (r + 1) % kClients;
        if (store->get_string("addr/" + std::to_string(peer), 1s) != "rank" + std::to_string(peer))
          ++failures;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
        ++failures;
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto check = connect_tcp_store("127.0.0.1", server.port(), "token", 5s);
  EXPECT_EQ(check->get_string("arrived", 1s), std::to_string(kClients));
}

// ---- File store ----

TEST(FileStore, AddIsAtomicAcrossProcesses) {
  TempDir dir;
  const std::string path = dir.path() + "/shared";
  constexpr int kAdds = 100;
  // Fork first, before this test starts any thread.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int rc = 0;
    try {
      auto store = make_file_store(path);
      std::ostringstream got;
      for (int i = 0; i < kAdds; ++i) got << store->add("counter", 1) << ",";
      store->set("child-values", got.str());
    } catch (...) {
      rc = 1;
    }
    ::_exit(rc);
  }
  auto store = make_file_store(path);
  std::set<int64_t> seen;
  for (int i = 0; i < kAdds; ++i) seen.insert(store->add("counter", 1));

  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 2000 && done == 0; ++i) {
    done = ::waitpid(child, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(10ms);
  }
  if (done == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "child process did not finish";
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::istringstream child_values(store->get_string("child-values", 1s));
  for (std::string v; std::getline(child_values, v, ',');) seen.insert(std::stoll(v));
  EXPECT_EQ(store->get_string("counter", 1s), std::to_string(2 * kAdds));
  EXPECT_EQ(seen.size(), size_t(2 * kAdds));
}

TEST(FileStore, KeysCannotEscapeTheDirectoryAndLongKeysWork) {
  TempDir dir;
  const std::string path = dir.path() + "/a/b/c";  // created on demand
  auto store = make_file_store(path);
  store->set("../outside", "x");
  store->set(".hidden", "y");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/a/b/outside"));
  EXPECT_EQ(store->get_string("../outside", 1s), "x");
  EXPECT_EQ(store->get_string(".hidden", 1s), "y");

  std::string long_a(1000, 'k');
  std::string long_b = long_a + "b";
  store->set(long_a, "A");
  store->set(long_b, "B");
  EXPECT_EQ(store->get_string(long_a, 1s), "A");
  EXPECT_EQ(store->get_string(long_b, 1s), "B");
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    EXPECT_LT(entry.path().filename().string().size(), 255u);
    EXPECT_FALSE(contains(entry.path().filename().string(), ".tmp."))
        << "temporary file left behind";
  }
}

TEST(FileStore, PathThatIsAFileIsAClearError) {
  TempDir dir;
  const std::string file = dir.path() + "/plain-file";
  make_file_store(dir.path())->set("x", "1");
  { std::ofstream(file) << "not a directory"; }
  EXPECT_THROW(make_file_store(file), Error);
}

}  // namespace
}  // namespace plait
