// `plait run` on SIGUSR1: asks the ranks' stall inspectors for a report and prints it. The
// request is counted in a file the ranks' world communicators read every tick
// (PLAIT_STALL_REQUESTS; src/coll/stall/stall_inspector.h), so that asking costs the ranks no
// store call while nobody asks; the report comes back through the job's store. It runs on a
// thread of its own, one request at a time, without holding up the launcher's event loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

namespace plait::cli {

class StallRequests {
 public:
  // `print` writes one line (it is called from the request's thread).
  StallRequests(std::string host, int port, std::string token,
                std::function<void(const std::string&)> print);
  ~StallRequests();
  StallRequests(const StallRequests&) = delete;
  StallRequests& operator=(const StallRequests&) = delete;

  // Starts a request unless one is still running (then says so).
  void request();
  // The request file, for the ranks' PLAIT_STALL_REQUESTS.
  const std::string& path() const { return path_; }

 private:
  void run();
  std::string path_;
  int64_t requests_ = 0;
  const std::string host_;
  const int port_;
  const std::string token_;
  std::function<void(const std::string&)> print_;
  std::thread thread_;
  std::atomic<bool> busy_{false};
};

}  // namespace plait::cli
