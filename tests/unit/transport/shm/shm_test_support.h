// Shared by the shm provider's unit tests: ranks as threads of this process, each with its
// own Fabric and segment over one in-process store, and the fixtures that set a pair up with
// cross-memory attach on or off (the test parameter).
#pragma once

#include <dirent.h>
#include <sys/uio.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <thread>

#include "core/clock.h"
#include "plait/store.h"
#include "transport/fabric.h"
#include "transport/memory_registry.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_provider.h"
#include "transport/shm/shm_settings.h"
#include "unit/transport/fabric_pair.h"
#include "unit/transport/fabric_test_support.h"

namespace plait::transport::shm_test {

using namespace std::chrono_literals;
using test::cma_available;
using test::pattern;
using test::wait_one;

inline Config test_config(const std::string& cma = "auto") {
  Config c;
  c.connect_timeout = 10s;
  c.timeout = 10s;
  c.get<transport::ShmSettings>().cma = cma;
  return c;
}

inline FabricOptions options_for(int rank, int size, std::shared_ptr<Store> store, const Config& config,
                                 const std::string& token = "job-secret",
                                 const std::string& name = "shm-test") {
  return test::fabric_options(rank, size, std::move(store), config, token, name);
}

// Creates `size` fabrics concurrently (creation blocks until every rank is attached).
inline std::vector<std::unique_ptr<Fabric>> make_fabrics(
    int size, const Config& config,
    const std::function<void(FabricOptions&)>& adjust = [](FabricOptions&) {}) {
  return test::make_fabrics_concurrently(size, [&](int r, std::shared_ptr<Store> store) {
    FabricOptions o = options_for(r, size, std::move(store), config);
    adjust(o);
    return create_shm_fabric(o);
  });
}

inline std::string format(uint64_t key) { return format_key(key); }

// A fabric name of this process alone, for tests that look into /dev/shm (ctest runs test
// cases of this binary side by side).
inline std::string unique_name(const std::string& base) { return base + "-" + std::to_string(::getpid()); }

// Entries of /dev/shm that belong to the job (token, name) of these tests.
inline std::vector<std::string> job_segments(const std::string& token, const std::string& name) {
  std::string prefix = shm::segment_name(token, name, 0);  // "/plait-<job>-0-<nonce>"
  prefix = prefix.substr(1, prefix.find('-', 7) - 1 + 1);   // "plait-<job>-"
  std::vector<std::string> found;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(e->d_name);
    ::closedir(d);
  }
  return found;
}

// Two ranks and a completion queue each over shm, with PLAIT_SHM_CMA the test parameter
// (fabric_pair.h's pair, for shm's own tests); ShmRma adds a region of rank 1's.
template <typename Pair>
class ShmCase : public Pair, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    test::g_case = test::shm_case(GetParam());
    if (const std::string why = test::unavailable(test::g_case); !why.empty()) GTEST_SKIP() << why;
    Pair::SetUp();
  }
};
using ShmPair = ShmCase<test::FabricPair>;
using ShmRma = ShmCase<test::FabricRmaPair>;

}  // namespace plait::transport::shm_test
