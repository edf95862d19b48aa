#include "support/job.h"

#include "plait/store.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace plait::testing {

std::string plait_bin() {
  const char* bin = std::getenv("PLAIT_BIN");
  return bin ? bin : "plait";
}

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

JobResult run_command(const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& env, int timeout_s) {
  JobResult result;
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return result;
  auto start = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(pipefd[1], 1);
    ::dup2(pipefd[1], 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(pipefd[1]);
  auto deadline = start + std::chrono::seconds(timeout_s);
  char buf[65536];
  bool killed = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      ::kill(-pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<long>(left, 1000)));
    if (rc <= 0) continue;
    ssize_t n = ::read(pipefd[0], buf, sizeof buf);
    if (n <= 0) break;
    result.output.append(buf, static_cast<size_t>(n));
  }
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (killed) {
    result.status = -1;
    result.output += "\n[test harness: killed after " + std::to_string(timeout_s) + " s]\n";
  } else if (WIFEXITED(status)) {
    result.status = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.status = 128 + WTERMSIG(status);
  }
  return result;
}

std::vector<RankResult> spawn_ranks(
    int world, const std::vector<int>& start, const std::string& mode,
    const std::function<std::map<std::string, std::string>(int)>& env_for, int timeout_s,
    const std::function<void(int, const std::vector<pid_t>&)>& while_running) {
  const std::string token = "test-token";
  TcpStoreServer server("127.0.0.1", 0, token);
  const std::string exe = self_exe();
  struct Child {
    pid_t pid;
    int fd;
    RankResult result;
    bool open = true;
  };
  std::vector<Child> children;
  for (int rank : start) {
    std::map<std::string, std::string> env = {
        {"PLAIT_TEST_CHILD", mode},
        {"PLAIT_RANK", std::to_string(rank)},
        {"PLAIT_WORLD_SIZE", std::to_string(world)},
        {"PLAIT_LOCAL_RANK", std::to_string(rank)},
        {"PLAIT_LOCAL_SIZE", std::to_string(world)},
        {"PLAIT_STORE_ADDR", "127.0.0.1:" + std::to_string(server.port())},
        {"PLAIT_JOB_TOKEN", token}};
    if (env_for)
      for (auto& [k, v] : env_for(rank)) env[k] = v;
    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) break;
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(pipefd[1], 1);
      ::dup2(pipefd[1], 2);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      ::execl(exe.c_str(), exe.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(pipefd[1]);
    children.push_back({pid, pipefd[0], RankResult{.rank = rank}});
  }
  std::thread beside;
  if (while_running) {
    std::vector<pid_t> pids;
    for (const auto& c : children) pids.push_back(c.pid);
    beside = std::thread([&, pids] { while_running(server.port(), pids); });
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  bool timed_out = false;
  for (;;) {
    std::vector<pollfd> fds;
    for (auto& c : children)
      if (c.open) fds.push_back({c.fd, POLLIN, 0});
    if (fds.empty()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    if (::poll(fds.data(), fds.size(), 500) <= 0) continue;
    char buf[65536];
    for (auto& c : children) {
      if (!c.open) continue;
      pollfd p{c.fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) continue;
      ssize_t n = ::read(c.fd, buf, sizeof buf);
      if (n <= 0) {
        c.open = false;
        ::close(c.fd);
      } else {
        c.result.output.append(buf, static_cast<size_t>(n));
      }
    }
  }
  if (beside.joinable()) beside.join();
  std::vector<RankResult> results;
  for (auto& c : children) {
    if (timed_out) ::kill(c.pid, SIGKILL);
    if (c.open) ::close(c.fd);
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    if (timed_out) c.result.status = -1;
    else if (WIFEXITED(status)) c.result.status = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) c.result.status = 128 + WTERMSIG(status);
    results.push_back(std::move(c.result));
  }
  return results;
}

JobResult run_job(int nranks, const std::string& mode,
                  const std::map<std::string, std::string>& env, int timeout_s) {
  std::map<std::string, std::string> full = env;
  full["PLAIT_TEST_CHILD"] = mode;
  return run_command({plait_bin(), "run", "-n", std::to_string(nranks), "--", self_exe()}, full,
                     timeout_s);
}

static std::map<std::string, std::function<int()>>& child_modes() {
  static std::map<std::string, std::function<int()>> modes;
  return modes;
}

ChildMode::ChildMode(const char* name, std::function<int()> body) {
  child_modes()[name] = std::move(body);
}

int run_child_mode_if_requested() {
  const char* mode = std::getenv("PLAIT_TEST_CHILD");
  if (mode == nullptr) return -1;
  auto it = child_modes().find(mode);
  if (it == child_modes().end()) {
    std::fprintf(stderr, "unknown PLAIT_TEST_CHILD mode '%s'\n", mode);
    return 2;
  }
  int code = 1;
  try {
    code = it->second();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child '%s' failed: %s\n", mode, e.what());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  return code;
}

}  // namespace plait::testing
