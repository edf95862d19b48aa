#include "coll/schedule/cache.h"

#include <functional>

namespace plait::coll {
namespace {

void mix(size_t& h, size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); }

void mix(size_t& h, const std::vector<size_t>& v) {
  mix(h, v.size());
  for (size_t x : v) mix(h, x);
}

}  // namespace

bool ScheduleCache::Key::operator==(const Key& o) const {
  return same(o.algorithm, o.args);
}

bool ScheduleCache::Key::same(const AlgorithmInfo* other_algorithm, const CollArgs& b) const {
  const CollArgs& a = args;
  return algorithm == other_algorithm && a.op == b.op && a.rank == b.rank && a.size == b.size &&
         a.dtype == b.dtype && a.redop == b.redop && a.root == b.root && a.count == b.count &&
         a.in_place == b.in_place && a.chunk_count == b.chunk_count &&
         a.ps_roots == b.ps_roots && a.counts == b.counts && a.displs == b.displs &&
         a.send_counts == b.send_counts && a.send_displs == b.send_displs &&
         a.host_of == b.host_of && a.intra_on_segment == b.intra_on_segment;
}

size_t ScheduleCache::KeyHash::operator()(const Key& k) const {
  const CollArgs& a = k.args;
  size_t h = std::hash<const void*>()(k.algorithm);
  for (size_t v : {static_cast<size_t>(a.op), static_cast<size_t>(a.rank),
                   static_cast<size_t>(a.size), static_cast<size_t>(a.dtype),
                   static_cast<size_t>(a.redop), static_cast<size_t>(a.root), a.count,
                   static_cast<size_t>(a.in_place), a.chunk_count, static_cast<size_t>(a.ps_roots)})
    mix(h, v);
  mix(h, a.counts);
  mix(h, a.displs);
  mix(h, a.send_counts);
  mix(h, a.send_displs);
  mix(h, a.host_of.size());
  for (int host : a.host_of) mix(h, static_cast<size_t>(host));
  mix(h, static_cast<size_t>(a.intra_on_segment));
  return h;
}

std::shared_ptr<const Schedule> ScheduleCache::get(const AlgorithmInfo& algorithm,
                                                   const CollArgs& args) {
  // The same shape as last time (a loop): no key to build, nothing to hash.
  if (last_ && last_key_.same(&algorithm, args)) return last_;
  Key key{&algorithm, args};
  auto remember = [&](std::shared_ptr<const Schedule> s) {
    last_key_ = key;
    last_ = s;
    return s;
  };
  auto it = map_.find(key);
  if (it != map_.end()) return remember(it->second);
  auto schedule = std::make_shared<const Schedule>(algorithm.build(args));
  if (map_.size() >= kCapacity) map_.clear();
  map_.emplace(key, schedule);
  return remember(schedule);
}

}  // namespace plait::coll
