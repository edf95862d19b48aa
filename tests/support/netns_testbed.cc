#include "support/netns_testbed.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace plait::testing {
namespace {

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Testbeds of test processes that were killed (their destructor never ran) go first.
void remove_orphans() {
  JobResult list = run_command({"ip", "netns", "list"}, {}, 30);
  const std::regex name(R"(^pt(\d+)(br|h\d+)\b)");
  std::istringstream lines(list.output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, name)) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(m[1]));
    if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH)
      run_command({"ip", "netns", "del", line.substr(0, line.find(' '))}, {}, 30);
  }
}

}  // namespace

std::optional<std::string> NetnsTestbed::unavailable() {
  if (::geteuid() != 0) return "network namespaces need root";
  const std::string probe = "plait-probe-" + std::to_string(::getpid());
  JobResult r = run_command({"sh", "-c", "ip netns add " + probe + " && ip netns del " + probe}, {}, 30);
  if (r.status != 0) return "cannot build network namespaces here: " + r.output;
  return std::nullopt;
}

NetnsTestbed::NetnsTestbed(int hosts) {
  remove_orphans();
  const std::string tag = "pt" + std::to_string(::getpid());
  bridge_ = tag + "br";
  try {
    sh("ip netns add " + bridge_);
    made_.push_back(bridge_);
    sh("ip -n " + bridge_ + " link set lo up && ip -n " + bridge_ + " link add br0 type bridge && ip -n " +
       bridge_ + " link set br0 up");
    for (int i = 0; i < hosts; ++i) {
      const std::string ns = tag + "h" + std::to_string(i), port = "port" + std::to_string(i);
      sh("ip netns add " + ns);
      made_.push_back(ns);
      hosts_.push_back(ns);
      // Born inside the two namespaces: no name ever exists out here.
      sh("ip -n " + ns + " link set lo up && ip link add eth0 netns " + ns + " type veth peer name " + port +
         " netns " + bridge_ + " && ip -n " + ns + " addr add " + address(i) + "/24 dev eth0 && ip -n " + ns +
         " link set eth0 up && ip -n " + bridge_ + " link set " + port + " master br0 && ip -n " + bridge_ +
         " link set " + port + " up");
    }
  } catch (...) {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) run_command({"ip", "netns", "del", *it}, {}, 30);
    throw;
  }
}

NetnsTestbed::~NetnsTestbed() {
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) run_command({"ip", "netns", "del", *it}, {}, 30);
}

void NetnsTestbed::sh(const std::string& command) {
  JobResult r = run_command({"sh", "-c", command}, {}, 30);
  if (r.status != 0) throw std::runtime_error("netns testbed: `" + command + "` failed: " + r.output);
}

void NetnsTestbed::link_down(int i) { sh("ip -n " + host(i) + " link set eth0 down"); }

void NetnsTestbed::isolate(int i) {
  sh("ip -n " + bridge_ + " link set port" + std::to_string(i) + " nomaster");
}

std::vector<NetnsTestbed::Rank> NetnsTestbed::run(
    const std::vector<int>& host_of, const std::string& mode,
    const std::map<std::string, std::string>& env, std::chrono::milliseconds fault_after,
    const Fault& fault, int timeout_s) {
  const int world = static_cast<int>(host_of.size());
  const std::string exe = self_exe();
  // The namespaces are this testbed's own; a new port per run keeps a run clear of the last
  // one's connections in TIME_WAIT.
  const std::string port = std::to_string(29500 + 2 * (runs_++ % 100));
  std::vector<Rank> ranks(static_cast<size_t>(world));
  std::vector<int> fds(static_cast<size_t>(world), -1);
  for (int r = 0; r < world; ++r) {
    int local = 0, local_size = 0;  // its place among the ranks of its host, and their number
    for (int q = 0; q < world; ++q) {
      if (host_of[static_cast<size_t>(q)] != host_of[static_cast<size_t>(r)]) continue;
      local += q < r ? 1 : 0;
      ++local_size;
    }
    std::map<std::string, std::string> vars = {
        {"PLAIT_TEST_CHILD", mode}, {"RANK", std::to_string(r)}, {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(local)}, {"LOCAL_WORLD_SIZE", std::to_string(local_size)},
        {"MASTER_ADDR", address(host_of[0])}, {"MASTER_PORT", port}};
    for (const auto& [k, v] : env) vars[k] = v;
    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    const std::string& ns = host(host_of[static_cast<size_t>(r)]);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(pipefd[1], 1);
      ::dup2(pipefd[1], 2);
      ::unsetenv("PLAIT_STORE_ADDR");
      for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
      // ip netns exec execs the program: the rank keeps this pid.
      ::execlp("ip", "ip", "netns", "exec", ns.c_str(), exe.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(pipefd[1]);
    ranks[static_cast<size_t>(r)].pid = pid;
    ranks[static_cast<size_t>(r)].result.rank = r;
    fds[static_cast<size_t>(r)] = pipefd[0];
  }
  const auto start = std::chrono::steady_clock::now();
  auto fault_at = start + fault_after;
  bool faulted = !fault;
  const auto deadline = start + fault_after + std::chrono::seconds(timeout_s);
  std::vector<bool> done(static_cast<size_t>(world), false), taken_out(done);
  int left = world;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    if (!faulted && std::chrono::steady_clock::now() >= fault_at) {
      std::vector<pid_t> pids;
      for (const Rank& rk : ranks) pids.push_back(rk.pid);
      // The ranks it takes out (stopped, say) are not waited for.
      for (pid_t out : fault(pids))
        for (int r = 0; r < world; ++r)
          if (ranks[static_cast<size_t>(r)].pid == out && !done[static_cast<size_t>(r)]) {
            done[static_cast<size_t>(r)] = true;
            --left;
            taken_out[static_cast<size_t>(r)] = true;
          }
      faulted = true;
      fault_at = std::chrono::steady_clock::now();
    }
    std::vector<pollfd> polled;
    for (int r = 0; r < world; ++r)
      if (!done[static_cast<size_t>(r)]) polled.push_back({fds[static_cast<size_t>(r)], POLLIN, 0});
    ::poll(polled.data(), polled.size(), 50);
    for (int r = 0; r < world; ++r) {
      if (done[static_cast<size_t>(r)]) continue;
      pollfd p{fds[static_cast<size_t>(r)], POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) continue;
      char buf[65536];
      ssize_t n = ::read(p.fd, buf, sizeof buf);
      Rank& rk = ranks[static_cast<size_t>(r)];
      if (n > 0) {
        rk.result.output.append(buf, static_cast<size_t>(n));
        continue;
      }
      done[static_cast<size_t>(r)] = true;
      --left;
      ::close(p.fd);
      int status = 0;
      ::waitpid(rk.pid, &status, 0);
      rk.result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      rk.exited_s = faulted && fault ? since(fault_at) : -1;
    }
  }
  for (int r = 0; r < world; ++r) {
    if (done[static_cast<size_t>(r)] && !taken_out[static_cast<size_t>(r)]) continue;
    Rank& rk = ranks[static_cast<size_t>(r)];
    ::kill(rk.pid, SIGKILL);
    ::close(fds[static_cast<size_t>(r)]);
    ::waitpid(rk.pid, nullptr, 0);
    rk.result.status = -1;  // the harness killed it
    rk.result.output += taken_out[static_cast<size_t>(r)] ? "\n[netns testbed: taken out by the fault]\n"
                                                          : "\n[netns testbed: killed after the run's timeout]\n";
  }
  return ranks;
}

}  // namespace plait::testing
