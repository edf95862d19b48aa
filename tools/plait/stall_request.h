// `plait run` on SIGUSR1: asks the ranks' stall inspectors for a report through the job's
// store (the world communicator of each rank answers; src/coll/stall/stall_inspector.h) and
// prints it, without holding up the launcher's event loop: the request runs on a thread of
// its own, one at a time.
#pragma once

#include <atomic>
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

 private:
  void run();
  const std::string host_;
  const int port_;
  const std::string token_;
  std::function<void(const std::string&)> print_;
  std::thread thread_;
  std::atomic<bool> busy_{false};
};

}  // namespace plait::cli
