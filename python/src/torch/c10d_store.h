// plait's rendezvous Store over the c10d::Store that torch.distributed hands a backend (a
// PrefixStore over its TCPStore or FileStore), so a process group bootstraps from the same
// rendezvous as every other torch backend.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "plait/store.h"

namespace plait::torch_backend {

class C10dStore : public Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::string& key) override;
  using Store::set;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace plait::torch_backend
