// The Work of a parameter-server call: a WorkImpl (waiting, callbacks, errors) and the
// version the pull returned.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/work_impl.h"
#include "plait/ps.h"

namespace plait::ps {

class PsWorkImpl final : public PsWork {
 public:
  PsWorkImpl(std::string_view op, size_t bytes, std::chrono::milliseconds timeout, int rank)
      : inner_(WorkLabel{.op = op, .bytes = bytes}, timeout, rank) {}

  bool test() override { return inner_.test(); }
  void wait(std::chrono::milliseconds timeout) override { inner_.wait(timeout); }
  void wait() override { inner_.wait(); }
  std::shared_ptr<const Error> error() const override { return inner_.error(); }
  int source() const override { return -1; }
  size_t bytes() const override { return inner_.bytes(); }
  const std::string& algorithm() const override { return inner_.algorithm(); }
  void on_complete(std::function<void()> callback) override { inner_.on_complete(std::move(callback)); }
  uint64_t version() const override { return version_.load(std::memory_order_acquire); }

  // The version first, then the outcome (readers see it once the Work is done).
  void finish(std::shared_ptr<const Error> error, uint64_t version, size_t bytes) {
    version_.store(version, std::memory_order_release);
    inner_.finish(std::move(error), -1, bytes);
  }

 private:
  WorkImpl inner_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace plait::ps
