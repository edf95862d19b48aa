// What the parameter server's multi-process tests share: rank-side checks that print a FAIL
// line and return 1, the gradients the workers push, a store from the test's environment,
// and the parent side's reading of the ranks' output.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "plait/plait.h"
#include "support/rank_checks.h"

namespace plait::testing {

using namespace std::chrono_literals;
using ps::Consistency;
using ps::KVStore;
using ps::Rule;

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// A worker's gradient for (step, element): exact in f32 (small integers), different per
// worker, step and element.
inline float grad(int worker, int step, size_t i) {
  return static_cast<float>((worker + 1) * 3 + step * 5 + static_cast<int>(i % 13));
}

inline std::shared_ptr<KVStore> make_store(Consistency c, int staleness = 0) {
  ps::Options o;
  o.servers = env_int("PS_SERVERS", 1);
  o.consistency = c;
  o.staleness = staleness;
  return KVStore::create(bootstrap_from_env(30s), o);
}

// Expects `call` to throw kInvalidUsage whose message contains `words`.
inline bool refused(const std::function<void()>& call, const std::string& words) {
  try {
    call();
  } catch (const Error& e) {
    if (e.category() == ErrorCategory::kInvalidUsage && std::string(e.what()).find(words) != std::string::npos)
      return true;
    std::printf("wrong error for '%s': %s\n", words.c_str(), e.what());
    return false;
  }
  std::printf("no error for '%s'\n", words.c_str());
  return false;
}

inline int report(const Error& e) {
  std::printf("ERROR %s: %s\n", std::string(to_string(e.category())).c_str(), e.what());
  std::fflush(stdout);
  return 3;
}

inline std::string error_line(const std::string& output) {
  size_t at = output.rfind("ERROR ");
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

}  // namespace plait::testing
