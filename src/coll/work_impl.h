// The Work handle behind every non-blocking call: completed once by the engine thread,
// waited on by any number of user threads.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>

#include "plait/communicator.h"

namespace plait::coll {

class WorkImpl : public Work {
 public:
  WorkImpl(std::string description, std::chrono::milliseconds default_timeout, ErrorContext ctx,
           std::string algorithm = {})
      : description_(std::move(description)),
        algorithm_(std::move(algorithm)),
        default_timeout_(default_timeout),
        ctx_(std::move(ctx)) {}

  bool test() override;
  void wait(std::chrono::milliseconds timeout) override;
  void wait() override { wait(default_timeout_); }
  std::shared_ptr<const Error> error() const override;
  int source() const override;
  size_t bytes() const override;
  const std::string& algorithm() const override { return algorithm_; }

  // Engine side. The first call wins; later ones are ignored.
  void finish(std::shared_ptr<const Error> error, int source = -1, size_t bytes = 0);
  const std::string& description() const { return description_; }

 private:
  const std::string description_;  // "allreduce #3 (4096 bytes)"
  const std::string algorithm_;
  const std::chrono::milliseconds default_timeout_;
  const ErrorContext ctx_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::shared_ptr<const Error> error_;
  int source_ = -1;
  size_t bytes_ = 0;
};

}  // namespace plait::coll
