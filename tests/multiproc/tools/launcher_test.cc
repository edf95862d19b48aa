// `plait run`, tested from outside: the launcher ($PLAIT_BIN) runs as a child of this test
// with its stdout and stderr captured in memory files; the ranks are shell one-liners or this
// very binary in a child mode (PLAIT_TEST_CHILD, see support/job.h), so a rank can use the store.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "plait/error.h"
#include "plait/store.h"
#include "support/job.h"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using plait::testing::count_of;

// ---------------------------------------------------------------------------------------------
// Child modes: what a rank does when this binary is started by `plait run`.

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : -1;
}

// Joins the job's store, counts itself in, waits for every rank, prints what it saw.
// With PLAIT_TEST_WRONG_TOKEN set, connects with a wrong token and expects to be refused.
int store_rank_main() {
  const std::string addr = std::getenv("PLAIT_STORE_ADDR") ? std::getenv("PLAIT_STORE_ADDR") : "";
  std::string token = std::getenv("PLAIT_JOB_TOKEN") ? std::getenv("PLAIT_JOB_TOKEN") : "";
  const bool wrong_token = std::getenv("PLAIT_TEST_WRONG_TOKEN") != nullptr;
  if (wrong_token) token += "-but-wrong";
  const int rank = env_int("PLAIT_RANK");
  const int size = env_int("PLAIT_WORLD_SIZE");
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || rank < 0 || size < 1) {
    std::printf("bad environment: PLAIT_STORE_ADDR='%s'\n", addr.c_str());
    return 1;
  }
  try {
    auto store = plait::connect_tcp_store(addr.substr(0, colon), std::stoi(addr.substr(colon + 1)),
                                          token, wrong_token ? 5s : 20s);
    if (wrong_token) {
      store->add("n", 1);  // a lazy client may only find out on its first request
      std::printf("a wrong token was accepted\n");
      return 1;
    }
    store->add("n", 1);
    store->set("arrived/" + std::to_string(rank), "yes");
    std::vector<std::string> everyone;
    for (int r = 0; r < size; ++r) everyone.push_back("arrived/" + std::to_string(r));
    store->wait(everyone, 20s);
    std::printf("store ok n=%s\n", store->get_string("n", 20s).c_str());
    return 0;
  } catch (const plait::Error& e) {
    std::printf("store error (%s): %s\n", std::string(plait::to_string(e.category())).c_str(),
                e.what());
    return wrong_token && e.category() == plait::ErrorCategory::kInvalidUsage ? 0 : 1;
  }
}

// Writes many numbered lines to stdout and stderr in writes that cut lines at odd places,
// then an unterminated last line.
int spam_rank_main() {
  const int rank = env_int("RANK");
  auto emit = [](int fd, const std::string& text) {
    unsigned chunk_seed = 12345;
    for (size_t at = 0; at < text.size();) {
      chunk_seed = chunk_seed * 1103515245 + 12345;
      size_t len = std::min<size_t>(1 + (chunk_seed >> 16) % 7919, text.size() - at);
      ssize_t n = ::write(fd, text.data() + at, len);
      if (n <= 0) return;
      at += static_cast<size_t>(n);
    }
  };
  std::string out, err;
  for (int i = 0; i < 20000; ++i) {
    out +=
        std::to_string(rank) + ":" + std::to_string(i) + ":" + std::string(40, 'a' + rank) + "\n";
    if (i % 10 == 0) err += std::to_string(rank) + ":" + std::to_string(i) + ":err\n";
  }
  out += "tail-" + std::to_string(rank);
  emit(1, out);
  emit(2, err);
  return 0;
}

// MASTER_PORT is held by the launcher for the job's life: a plain bind to it fails (so no
// other launcher's port-0 pick lands on it), and torch's store (SO_REUSEADDR, every address)
// can still bind and listen there.
int master_port_rank_main() {
  const int port = env_int("MASTER_PORT");
  sockaddr_in loop{};
  loop.sin_family = AF_INET;
  loop.sin_port = htons(static_cast<uint16_t>(port));
  loop.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int plain = ::socket(AF_INET, SOCK_STREAM, 0);
  const bool plain_bound = ::bind(plain, reinterpret_cast<sockaddr*>(&loop), sizeof loop) == 0;
  const int plain_err = errno;
  ::close(plain);
  sockaddr_in6 any{};
  any.sin6_family = AF_INET6;
  any.sin6_port = htons(static_cast<uint16_t>(port));
  any.sin6_addr = in6addr_any;
  const int server = ::socket(AF_INET6, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool listening = ::bind(server, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0 &&
                         ::listen(server, 8) == 0;
  ::close(server);
  std::printf("plain bind %s (%s), store listen %s\n", plain_bound ? "ok" : "refused",
              std::strerror(plain_err), listening ? "ok" : "refused");
  return 0;
}

const plait::testing::ChildMode kStoreRank("launcher-store", store_rank_main);
const plait::testing::ChildMode kMasterPortRank("launcher-master-port", master_port_rank_main);
const plait::testing::ChildMode kSpamRank("launcher-spam", spam_rank_main);

// ---------------------------------------------------------------------------------------------
// Running the launcher. Not support/job.h's run_command: these tests need stdout and stderr
// apart, a stdin held open, and the launcher's pid to signal it.

std::string plait_bin() {
  if (const char* bin = std::getenv("PLAIT_BIN")) return bin;
  // A build tree run without ctest: build/tests/launcher_test -> build/tools/plait/plait.
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() /
          "tools/plait/plait")
      .string();
}

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

std::string read_memfd(int fd) {
  std::string text;
  char buf[65536];
  for (off_t at = 0;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) return text;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
}

struct Result {
  int status = -1;  // as a shell reports it: exit code, or 128 + signal
  std::string out;
  std::string err;
  double seconds = 0;
};

// A launcher started by the test. Its stdin is a pipe the test keeps open, so a rank that
// read the launcher's stdin would hang instead of seeing end of file.
class Launcher {
 public:
  explicit Launcher(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& extra_env = {}) {
    std::vector<std::string> argv = {plait_bin(), "run"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string entry = *e;
      if (!extra_env.contains(entry.substr(0, entry.find('=')))) env.push_back(entry);
    }
    for (const auto& [key, value] : extra_env) env.push_back(key + "=" + value);
    std::vector<char*> c_argv, c_env;
    for (auto& s : argv) c_argv.push_back(s.data());
    for (auto& s : env) c_env.push_back(s.data());
    c_argv.push_back(nullptr);
    c_env.push_back(nullptr);

    out_fd_ = ::memfd_create("plait-run-stdout", MFD_CLOEXEC);
    err_fd_ = ::memfd_create("plait-run-stderr", MFD_CLOEXEC);
    int in[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    stdin_write_ = in[1];
    started_ = std::chrono::steady_clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out_fd_, 1);
      ::dup2(err_fd_, 2);
      ::execve(c_argv[0], c_argv.data(), c_env.data());
      ::_exit(126);
    }
    ::close(in[0]);
  }
  ~Launcher() {
    if (status_ < 0 && pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(out_fd_);
    ::close(err_fd_);
    ::close(stdin_write_);
  }

  pid_t pid() const { return pid_; }
  std::string out() const { return read_memfd(out_fd_); }
  std::string err() const { return read_memfd(err_fd_); }

  // Waits for the launcher to exit; past `limit` it is killed and the test fails.
  Result wait(std::chrono::seconds limit = 30s) {
    Result result;
    auto deadline = started_ + limit;
    int raw = 0;
    while (::waitpid(pid_, &raw, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "plait run did not finish within " << limit.count() << " s";
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &raw, 0);
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    status_ = WIFSIGNALED(raw) ? 128 + WTERMSIG(raw) : WEXITSTATUS(raw);
    result.status = status_;
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    result.out = out();
    result.err = err();
    return result;
  }

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  int stdin_write_ = -1;
  std::chrono::steady_clock::time_point started_;
};

Result run_plait(const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& extra_env = {}) {
  return Launcher(args, extra_env).wait();
}

// Polls `condition` until it holds or 20 s pass.
bool eventually(const std::function<bool()>& condition) {
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// A zombie waiting for init to reap it counts as gone.
bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

// Every pid printed after the word "pids" in the output.
std::vector<pid_t> printed_pids(const std::string& out) {
  std::vector<pid_t> pids;
  std::regex pattern(R"(pids ([0-9]+) ([0-9]+))");
  for (std::sregex_iterator it(out.begin(), out.end(), pattern), end; it != end; ++it) {
    pids.push_back(std::stoi((*it)[1]));
    pids.push_back(std::stoi((*it)[2]));
  }
  return pids;
}

void expect_all_gone(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    EXPECT_TRUE(eventually([&] { return !process_alive(pid); }))
        << "process " << pid << " outlived the job";
  }
}

// A scratch directory for ranks to signal "I am ready" through files.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/plait-launcher-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Shell snippet: wait (at most 20 s) until `n` files exist in $READY_DIR.
std::string wait_for_ready_files(int n) {
  return "i=0; while [ $(ls \"$READY_DIR\" | wc -l) -lt " + std::to_string(n) +
         " ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; ";
}

// ---------------------------------------------------------------------------------------------

class LauncherEnvTest : public ::testing::TestWithParam<int> {};

TEST_P(LauncherEnvTest, EveryRankGetsItsEnvironmentAndItsPrefix) {
  const int n = GetParam();
  Result r = run_plait({"-n", std::to_string(n), "--", "sh", "-c",
                        "echo $RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE/$GROUP_RANK/"
                        "$PLAIT_RANK/$PLAIT_WORLD_SIZE/$PLAIT_LOCAL_RANK/$PLAIT_LOCAL_SIZE/"
                        "$MASTER_ADDR/$MASTER_PORT/$PLAIT_STORE_ADDR/${#PLAIT_JOB_TOKEN}"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::regex line(
      R"(\[(\d+)\] (\d+)/(\d+)/(\d+)/(\d+)/0/(\d+)/(\d+)/(\d+)/(\d+)/127\.0\.0\.1/(\d+)/127\.0\.0\.1:(\d+)/(\d+))");
  std::istringstream lines(r.out);
  std::string text, master_port, store_port;
  std::vector<bool> seen(static_cast<size_t>(n), false);
  while (std::getline(lines, text)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(text, m, line)) << "unexpected line: " << text;
    const std::string rank = m[1];
    ASSERT_LT(std::stoi(rank), n);
    seen[static_cast<size_t>(std::stoi(rank))] = true;
    for (int field : {2, 4, 6, 8}) EXPECT_EQ(m[field], rank) << text;
    for (int field : {3, 5, 7, 9}) EXPECT_EQ(m[field], std::to_string(n)) << text;
    EXPECT_GT(std::stoi(m[12]), 0) << "empty PLAIT_JOB_TOKEN";
    if (master_port.empty()) {
      master_port = m[10];
      store_port = m[11];
    }
    EXPECT_EQ(m[10], master_port) << "ranks disagree on MASTER_PORT";
    EXPECT_EQ(m[11], store_port) << "ranks disagree on PLAIT_STORE_ADDR";
  }
  for (int rank = 0; rank < n; ++rank) EXPECT_TRUE(seen[rank]) << "no line from rank " << rank;
  EXPECT_NE(master_port, store_port) << "MASTER_PORT must be left to torch's own store";
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, LauncherEnvTest, ::testing::Values(1, 4));

// This process's Cpus_allowed_list (the launcher inherits it), and its CPUs one by one.
std::string own_cpu_list() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return line.substr(line.find_first_not_of(" \t", 18));
  return "";
}

std::vector<int> own_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  return cpus;
}

// Each rank's Cpus_allowed_list, by rank.
std::map<int, std::string> rank_cpu_lists(const std::vector<std::string>& args,
                                          const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> all = args;
  for (const char* word : {"--", "sh", "-c", "grep Cpus_allowed_list /proc/self/status"})
    all.emplace_back(word);
  Result r = run_plait(all, env);
  EXPECT_EQ(r.status, 0) << r.err;
  std::map<int, std::string> lists;
  std::regex line(R"(\[(\d+)\] Cpus_allowed_list:\s*(\S+))");
  std::istringstream lines(r.out);
  for (std::string text; std::getline(lines, text);) {
    std::smatch m;
    if (std::regex_match(text, m, line)) lists[std::stoi(m[1])] = m[2];
  }
  return lists;
}

// Unbound unless asked; asked, like mpirun: one rank per CPU while there are enough CPUs
// (auto), or round robin (core).
TEST(Launcher, BindsRanksToCpusWhenAsked) {
  const std::vector<int> cpus = own_cpus();
  ASSERT_FALSE(cpus.empty());
  const int k = static_cast<int>(cpus.size());
  const std::string everything = own_cpu_list();

  auto bound = rank_cpu_lists({"-n", std::to_string(k), "--bind", "auto"});
  ASSERT_EQ(bound.size(), static_cast<size_t>(k));
  for (int r = 0; r < k; ++r) EXPECT_EQ(bound[r], std::to_string(cpus[r])) << "rank " << r;

  auto round_robin = rank_cpu_lists({"-n", std::to_string(k + 1), "--bind", "core"});
  ASSERT_EQ(round_robin.size(), static_cast<size_t>(k + 1));
  for (int r = 0; r <= k; ++r) EXPECT_EQ(round_robin[r], std::to_string(cpus[r % k])) << "rank " << r;

  auto from_env = rank_cpu_lists({"-n", "1"}, {{"PLAIT_BIND", "core"}});
  EXPECT_EQ(from_env[0], std::to_string(cpus[0]));

  // auto: more ranks than CPUs are left to the scheduler; so is everything under none, the
  // default.
  for (const auto& lists : {rank_cpu_lists({"-n", std::to_string(k + 1), "--bind", "auto"}),
                            rank_cpu_lists({"-n", "2"}),
                            rank_cpu_lists({"-n", "2", "--bind=none"}, {{"PLAIT_BIND", "core"}})})
    for (const auto& [rank, list] : lists) EXPECT_EQ(list, everything) << "rank " << rank;

  Result bad = run_plait({"-n", "2", "--bind", "socket", "true"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--bind takes auto, core or none"), std::string::npos) << bad.err;
}

TEST(Launcher, StdoutAndStderrAreRelayedSeparatelyAndStdinIsEmpty) {
  Result r = run_plait(
      {"-n", "2", "sh", "-c", "cat; echo out-$RANK; echo err-$RANK >&2; printf no-newline-$RANK"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (std::string rank : {"0", "1"}) {
    std::string p = "[" + rank + "] ";
    EXPECT_NE(r.out.find(p + "out-" + rank + "\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(p + "no-newline-" + rank + "\n"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find(p + "err-" + rank + "\n"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("err-"), std::string::npos) << r.out;
  }
}

TEST(Launcher, LargeOutputKeepsEveryLineWholeAndInOrder) {
  const int n = 4;
  Result r =
      run_plait({"-n", std::to_string(n), self_exe()}, {{"PLAIT_TEST_CHILD", "launcher-spam"}});
  ASSERT_EQ(r.status, 0) << r.err.substr(0, 2000);
  std::vector<int> next_out(n, 0), next_err(n, 0);
  std::regex out_line(R"(\[(\d)\] (\d):(\d+):([a-z]+))");
  std::regex err_line(R"(\[(\d)\] (\d):(\d+):err)");
  std::regex tail_line(R"(\[(\d)\] tail-(\d))");
  std::istringstream out(r.out);
  std::string text;
  int tails = 0;
  while (std::getline(out, text)) {
    std::smatch m;
    if (std::regex_match(text, m, tail_line)) {
      EXPECT_EQ(m[1], m[2]);
      EXPECT_EQ(next_out[std::stoi(m[1])], 20000) << "tail before the last line";
      ++tails;
      continue;
    }
    ASSERT_TRUE(std::regex_match(text, m, out_line)) << "mangled line: " << text.substr(0, 200);
    int rank = std::stoi(m[1]);
    ASSERT_EQ(m[2], m[1]) << text;
    ASSERT_EQ(std::stoi(m[3]), next_out[rank]++) << text;
    ASSERT_EQ(m[4], std::string(40, 'a' + rank)) << text;
  }
  EXPECT_EQ(tails, n);
  std::istringstream err(r.err);
  while (std::getline(err, text)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(text, m, err_line)) << "mangled line: " << text.substr(0, 200);
    int rank = std::stoi(m[1]);
    ASSERT_EQ(std::stoi(m[3]), next_err[rank]) << text;
    next_err[rank] += 10;
  }
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_EQ(next_out[rank], 20000);
    EXPECT_EQ(next_err[rank], 20000);
  }
}

TEST(Launcher, FailingRankStopsTheOthersWithoutOrphans) {
  ScratchDir ready;
  Result r = run_plait({"-n", "4", "sh", "-c",
                        "if [ \"$RANK\" = 2 ]; then " + wait_for_ready_files(3) +
                            "exit 3; fi; "
                            "sleep 60 & echo pids $$ $!; touch \"$READY_DIR/$RANK\"; wait"},
                       {{"READY_DIR", ready.path()}});
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_LT(r.seconds, 30);
  EXPECT_NE(r.err.find("plait run: rank 2 (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(") exited with status 3; stopping the other 3 ranks"), std::string::npos)
      << r.err;
  EXPECT_EQ(count_of(r.err, "plait run:"), 1u) << "one clear line, not one per rank:\n" << r.err;
  std::vector<pid_t> pids = printed_pids(r.out);
  EXPECT_EQ(pids.size(), 6u) << r.out;
  expect_all_gone(pids);
}

TEST(Launcher, RankKilledBySignalIsNamed) {
  Result r = run_plait(
      {"-n", "2", "sh", "-c", "if [ \"$RANK\" = 1 ]; then kill -9 $$; fi; exec sleep 60"});
  EXPECT_EQ(r.status, 128 + SIGKILL) << r.err;
  EXPECT_NE(r.err.find("plait run: rank 1 (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("was killed by signal 9 (SIGKILL)"), std::string::npos) << r.err;
}

TEST(Launcher, SigtermToTheLauncherStopsEveryRank) {
  Launcher launcher({"-n", "3", "sh", "-c", "sleep 60 & echo pids $$ $!; wait"});
  ASSERT_TRUE(eventually([&] { return printed_pids(launcher.out()).size() == 6; }))
      << launcher.out();
  ::kill(launcher.pid(), SIGTERM);
  Result r = launcher.wait();
  EXPECT_EQ(r.status, 128 + SIGTERM) << r.err;
  EXPECT_NE(r.err.find("received SIGTERM"), std::string::npos) << r.err;
  expect_all_gone(printed_pids(r.out));
}

TEST(Launcher, KilledLauncherLeavesNoOrphans) {
  // SIGKILL leaves the launcher no chance to clean up; the kernel and its watchdog must.
  Launcher launcher({"-n", "2", "sh", "-c", "sleep 60 & echo pids $$ $!; wait"});
  ASSERT_TRUE(eventually([&] { return printed_pids(launcher.out()).size() == 4; }))
      << launcher.out();
  ::kill(launcher.pid(), SIGKILL);
  Result r = launcher.wait();
  EXPECT_EQ(r.status, 128 + SIGKILL);
  expect_all_gone(printed_pids(r.out));
}

TEST(Launcher, SecondSigintKillsRanksThatIgnoreTheFirst) {
  // A grace period far beyond the test's limit: only the second SIGINT can end this job.
  Launcher launcher(
      {"-n", "2", "sh", "-c", "trap '' INT; echo pids $$ $$; while :; do sleep 0.2; done"},
      {{"PLAIT_RUN_GRACE_S", "600"}});
  ASSERT_TRUE(eventually([&] { return printed_pids(launcher.out()).size() == 4; }));
  ::kill(launcher.pid(), SIGINT);
  ASSERT_TRUE(
      eventually([&] { return launcher.err().find("received SIGINT") != std::string::npos; }));
  ::kill(launcher.pid(), SIGINT);
  Result r = launcher.wait();
  EXPECT_EQ(r.status, 128 + SIGINT) << r.err;
  EXPECT_NE(r.err.find("killing the 2 ranks"), std::string::npos) << r.err;
  expect_all_gone(printed_pids(r.out));
}

TEST(Launcher, RanksIgnoringSigtermAreKilledAfterTheGracePeriod) {
  ScratchDir ready;
  Result r = run_plait({"-n", "3", "--grace", "0.5", "sh", "-c",
                        "if [ \"$RANK\" = 0 ]; then " + wait_for_ready_files(2) +
                            "exit 5; fi; "
                            "trap '' TERM; echo pids $$ $$; touch \"$READY_DIR/$RANK\"; while :; "
                            "do sleep 0.2; done"},
                       {{"READY_DIR", ready.path()}});
  EXPECT_EQ(r.status, 5) << r.err;
  EXPECT_NE(r.err.find("plait run: rank 0 (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(") exited with status 5; stopping the other 2 ranks"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("2 ranks still running 0.5 s after SIGTERM; sending SIGKILL"),
            std::string::npos)
      << r.err;
  expect_all_gone(printed_pids(r.out));
}

TEST(Launcher, TimeoutStopsTheJob) {
  Result r = run_plait({"-n", "2", "--timeout", "0.5", "sleep", "60"});
  EXPECT_EQ(r.status, 124) << r.err;
  EXPECT_NE(r.err.find("ran past its timeout of 0.5 s; stopping ranks 0, 1, still running"),
            std::string::npos)
      << r.err;
}

// A job that hangs in one rank (at exit, say) says which one.
TEST(Launcher, TimeoutNamesTheRanksStillRunning) {
  Result r = run_plait({"-n", "3", "--timeout", "1", "sh", "-c",
                        "if [ \"$RANK\" = 1 ]; then sleep 60; fi"});
  EXPECT_EQ(r.status, 124) << r.err;
  EXPECT_NE(r.err.find("ran past its timeout of 1 s; stopping rank 1, still running"),
            std::string::npos)
      << r.err;
}

TEST(Launcher, MissingCommandExits127) {
  Result r = run_plait({"-n", "3", "plait-test-no-such-command", "arg"});
  EXPECT_EQ(r.status, 127);
  EXPECT_EQ(r.err,
            "plait run: cannot execute 'plait-test-no-such-command': No such file or directory\n");
  EXPECT_EQ(r.out, "");
}

TEST(Launcher, UsageErrorsExit2WithTheUsage) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {}, {"-n", "0", "true"}, {"-n", "2"}, {"--bogus", "-n", "2", "true"}, {"true"}}) {
    Result r = run_plait(args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("usage: plait run -n N"), std::string::npos) << r.err;
  }
  Result help = run_plait({"--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("usage: plait run -n N"), std::string::npos);
}

TEST(Launcher, CommandOptionsNeedNoDoubleDash) {
  Result r = run_plait({"-n1", "sh", "-c", "echo $WORLD_SIZE", "-n", "7"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[0] 1\n");
}

TEST(Launcher, RanksReachTheStore) {
  Result r = run_plait({"-n", "4", self_exe()}, {{"PLAIT_TEST_CHILD", "launcher-store"}});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("[" + std::to_string(rank) + "] store ok n="), std::string::npos) << r.out;
  }
  // Everyone waited for everyone, so nobody read n before all four had added themselves.
  EXPECT_EQ(count_of(r.out, "store ok n=4\n"), 4u) << r.out;
}

TEST(Launcher, MasterPortIsHeldForTheJobAndFreeForTorchsStore) {
  Result r = run_plait({"-n", "1", self_exe()}, {{"PLAIT_TEST_CHILD", "launcher-master-port"}});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("plain bind refused (Address already in use), store listen ok"),
            std::string::npos)
      << r.out << r.err;
}

TEST(Launcher, WrongJobTokenIsRefused) {
  Result r = run_plait({"-n", "2", self_exe()},
                       {{"PLAIT_TEST_CHILD", "launcher-store"}, {"PLAIT_TEST_WRONG_TOKEN", "1"}});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(count_of(r.out, "store error (invalid usage)"), 2u) << r.out;
  // Each rank's own error says which store refused it, and why.
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(r.out.find("[" + std::to_string(rank) +
                         "] store error (invalid usage): store connect: job token rejected by "
                         "store at 127.0.0.1:"),
              std::string::npos)
        << r.out;
  }
}

}  // namespace
