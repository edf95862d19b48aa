// Shared by the providers' unit tests: ranks as threads of this process, each with its own
// Fabric, over one in-process store.
#pragma once

#include <sys/uio.h>
#include <unistd.h>

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "plait/store.h"
#include "transport/fabric.h"

namespace plait::transport::test {

// Whether this process may use process_vm_readv at all (a seccomp profile may forbid it).
inline bool cma_available() {
  static const bool ok = [] {
    uint64_t src = 42, dst = 0;
    iovec l{&dst, 8}, r{&src, 8};
    return ::process_vm_readv(::getpid(), &l, 1, &r, 1, 0) == 8 && dst == 42;
  }();
  return ok;
}

inline FabricOptions fabric_options(int rank, int size, std::shared_ptr<Store> store,
                                    const Config& config, const std::string& token,
                                    const std::string& name) {
  FabricOptions o;
  o.rank = rank;
  o.size = size;
  o.store = std::move(store);
  o.name = name;
  o.job_token = token;
  o.config = config;
  return o;
}

// Creates `size` fabrics, one per thread, concurrently (creation blocks until every rank is
// there), with `create(rank, store)`; rethrows the first rank's failure.
inline std::vector<std::unique_ptr<Fabric>> make_fabrics_concurrently(
    int size,
    const std::function<std::unique_ptr<Fabric>(int rank, std::shared_ptr<Store> store)>& create) {
  auto store = make_hash_store();
  std::vector<std::unique_ptr<Fabric>> fabrics(size);
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        fabrics[r] = create(r, store);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return fabrics;
}

}  // namespace plait::transport::test
