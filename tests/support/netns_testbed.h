// Hosts for multi-host tests: network namespaces on a bridge of their own (the bridge in a
// namespace too, so nothing touches this machine's network), host i at 10.79.0.(i+1). Ranks
// run in them as under torchrun (rank 0 hosts the store at MASTER_ADDR), and faults are made
// to happen to a host or a rank while a job runs. Needs root and iproute2: available() says
// why not, for a test to skip with.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "support/job.h"

namespace plait::testing {

class NetnsTestbed {
 public:
  // nullopt when this process can build namespaces; else why not.
  static std::optional<std::string> unavailable();

  // Throws std::runtime_error with the commands' output if a step fails (and removes what
  // it made). The names carry this process's id, so tests that ctest runs at once do not meet.
  explicit NetnsTestbed(int hosts);
  ~NetnsTestbed();
  NetnsTestbed(const NetnsTestbed&) = delete;
  NetnsTestbed& operator=(const NetnsTestbed&) = delete;

  const std::string& host(int i) const { return hosts_[static_cast<size_t>(i)]; }
  static std::string address(int i) { return "10.79.0." + std::to_string(i + 1); }

  // Faults. The link of host i goes down (its end of the cable: the host sees it).
  void link_down(int i);
  // Host i's port leaves the bridge: its packets go nowhere, silently (no RST, no FIN, its
  // link stays up), as when a switch drops a host's traffic.
  void isolate(int i);

  struct Rank {
    pid_t pid = -1;
    RankResult result;
    double exited_s = -1;  // seconds from the fault to the rank's exit (< 0: before it)
  };
  // Makes a fault happen, given the ranks' pids; returns those of the ranks it took out of
  // the run (stopped, say): they are not waited for, and are killed at the end.
  using Fault = std::function<std::vector<pid_t>(const std::vector<pid_t>&)>;
  // Runs this test binary's child `mode` as `host_of.size()` ranks, rank r on host
  // host_of[r], with `env` added; after `fault_after` calls `fault` (if given) and then
  // waits up to `timeout_s` for every rank. Rank 0 hosts the store.
  std::vector<Rank> run(const std::vector<int>& host_of, const std::string& mode,
                        const std::map<std::string, std::string>& env,
                        std::chrono::milliseconds fault_after = {}, const Fault& fault = nullptr,
                        int timeout_s = 120);

 private:
  void sh(const std::string& command);
  std::string bridge_;
  std::vector<std::string> hosts_;
  std::vector<std::string> made_;
  int runs_ = 0;
};

}  // namespace plait::testing
