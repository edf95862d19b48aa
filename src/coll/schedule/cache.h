// Schedules are pure functions of a call's shape (CollArgs) and algorithm, so a training loop
// that calls the same collective on the same tensor sizes step after step needs each one
// built once. Building costs far more than running a small collective over shared memory.
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include "coll/select/algorithms.h"

namespace plait::coll {

class ScheduleCache {
 public:
  // Built on first use; later calls with an equal shape share it. Throws what the builder
  // throws (and caches nothing then).
  std::shared_ptr<const Schedule> get(const AlgorithmInfo& algorithm, const CollArgs& args);
  size_t size() const { return map_.size(); }

 private:
  struct Key {
    const AlgorithmInfo* algorithm;
    CollArgs args;
    bool operator==(const Key& o) const;
    bool same(const AlgorithmInfo* other_algorithm, const CollArgs& other_args) const;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  // Shapes beyond this many distinct ones start over (a job sweeping sizes, like a
  // benchmark, must not grow the cache without bound).
  static constexpr size_t kCapacity = 512;
  std::unordered_map<Key, std::shared_ptr<const Schedule>, KeyHash> map_;
  Key last_key_{nullptr, {}};
  std::shared_ptr<const Schedule> last_;
};

}  // namespace plait::coll
