#include "coll/schedule/builder.h"

#include <algorithm>
#include <numeric>

#include "plait/error.h"

namespace plait::coll {

// ---- HazardTracker ----

HazardTracker::Map::iterator HazardTracker::split(Map& map, size_t at) {
  if (map.empty()) map.emplace(0, Segment{});
  auto it = std::prev(map.upper_bound(at));
  if (it->first == at) return it;
  return map.emplace_hint(std::next(it), at, it->second);
}

void HazardTracker::record(StepId step, std::span<const Use> uses, std::vector<StepId>* deps) {
  for (const Use& u : uses) {
    if (u.region.empty()) continue;
    Map& map = maps_[static_cast<int>(u.region.buffer)];
    auto first = split(map, u.region.begin);
    auto last = split(map, u.region.end);
    for (auto it = first; it != last; ++it) {
      const Segment& seg = it->second;
      if (u.access == Access::kRead) {
        if (seg.writer) deps->push_back(*seg.writer);
      } else if (!seg.readers.empty()) {
        // Every reader since the last write already waits for that write.
        deps->insert(deps->end(), seg.readers.begin(), seg.readers.end());
      } else if (seg.writer) {
        deps->push_back(*seg.writer);
      }
    }
  }
  for (const Use& u : uses) {
    if (u.region.empty()) continue;
    Map& map = maps_[static_cast<int>(u.region.buffer)];
    auto first = split(map, u.region.begin);
    auto last = split(map, u.region.end);
    if (u.access == Access::kRead) {
      for (auto it = first; it != last; ++it) {
        auto& r = it->second.readers;
        if (r.empty() || r.back() != step) r.push_back(step);
      }
    } else {
      // One writer for the whole range now: merge its segments so the map stays small.
      map.erase(std::next(first), last);
      first->second = Segment{step, {}};
    }
  }
}

// ---- ScheduleBuilder ----

ScheduleBuilder::ScheduleBuilder(const CollArgs& args, std::string algorithm)
    : args_(args) {
  validate_args(args);
  layout_ = layout_of(args_);
  sched_.algorithm = std::move(algorithm);
}

StepId ScheduleBuilder::add(StepKind kind, int peer, Slice src, Slice dst,
                            std::span<const StepId> after) {
  using A = HazardTracker::Access;
  HazardTracker::Use uses[2];
  size_t n = 0;
  switch (kind) {
    case StepKind::kSend: uses[n++] = {where(src), A::kRead}; break;
    case StepKind::kRecv: uses[n++] = {where(dst), A::kWrite}; break;
    case StepKind::kRecvReduce:
      uses[n++] = {where(src), A::kWrite};
      uses[n++] = {where(dst), A::kReadWrite};
      break;
    case StepKind::kCopy:
      uses[n++] = {where(src), A::kRead};
      uses[n++] = {where(dst), A::kWrite};
      break;
    case StepKind::kReduce:
      uses[n++] = {where(src), A::kRead};
      uses[n++] = {where(dst), A::kReadWrite};
      break;
  }
  bool writes_input = (kind != StepKind::kSend && dst.buffer == BufferId::kInput && dst.count) ||
                      (kind == StepKind::kRecvReduce && src.buffer == BufferId::kInput);
  if (writes_input && !layout_.in_place) {
    throw invalid_usage("schedule builder " + sched_.algorithm + " (" +
                        std::string(to_string(args_.op)) +
                        ") writes the input buffer of an out-of-place call");
  }
  StepId id = static_cast<StepId>(sched_.steps.size());
  deps_.assign(after.begin(), after.end());
  tracker_.record(id, std::span<const HazardTracker::Use>(uses, n), &deps_);
  std::sort(deps_.begin(), deps_.end());
  deps_.erase(std::unique(deps_.begin(), deps_.end()), deps_.end());
  switch (kind) {
    case StepKind::kSend: return sched_.send(peer, src, deps_);
    case StepKind::kRecv: return sched_.recv(peer, dst, deps_);
    case StepKind::kRecvReduce: return sched_.recv_reduce(peer, src, dst, deps_);
    case StepKind::kCopy: return sched_.copy(src, dst, deps_);
    case StepKind::kReduce: return sched_.reduce(src, dst, deps_);
  }
  return id;
}

StepId ScheduleBuilder::send(int peer, Slice src, std::span<const StepId> after) {
  return add(StepKind::kSend, peer, src, Slice{}, after);
}
StepId ScheduleBuilder::recv(int peer, Slice dst, std::span<const StepId> after) {
  return add(StepKind::kRecv, peer, Slice{}, dst, after);
}
StepId ScheduleBuilder::recv_reduce(int peer, Slice staging, Slice accum,
                                    std::span<const StepId> after) {
  return add(StepKind::kRecvReduce, peer, staging, accum, after);
}
StepId ScheduleBuilder::reduce(Slice src, Slice dst, std::span<const StepId> after) {
  return add(StepKind::kReduce, -1, src, dst, after);
}

void ScheduleBuilder::copy(Slice src, Slice dst) {
  if (src.count == 0) return;
  Region s = where(src), d = where(dst);
  if (same_region(s, d)) return;
  if (overlap(s, d)) {
    // memcpy semantics forbid overlap; a bounce through scratch is rare (in-place v-ops).
    Slice tmp = scratch(src.count);
    add(StepKind::kCopy, -1, src, tmp, {});
    add(StepKind::kCopy, -1, tmp, dst, {});
    return;
  }
  add(StepKind::kCopy, -1, src, dst, {});
}

namespace {

template <typename F>
void for_each_chunk(size_t count, size_t chunk, F&& f) {
  size_t step = chunk == 0 ? count : chunk;
  for (size_t off = 0; off < count; off += step) f(off, std::min(step, count - off));
}

}  // namespace

std::vector<StepId> ScheduleBuilder::send_chunks(int peer, Slice src, size_t chunk) {
  std::vector<StepId> ids;
  for_each_chunk(src.count, chunk, [&](size_t off, size_t n) {
    ids.push_back(send(peer, sub(src, off, n)));
  });
  return ids;
}

std::vector<StepId> ScheduleBuilder::recv_chunks(int peer, Slice dst, size_t chunk) {
  std::vector<StepId> ids;
  for_each_chunk(dst.count, chunk, [&](size_t off, size_t n) {
    ids.push_back(recv(peer, sub(dst, off, n)));
  });
  return ids;
}

StepId ScheduleBuilder::handshake(int peer, StepId finished) {
  const Slice token{BufferId::kOutput, 0, 0};
  const StepId after[] = {finished};
  send(peer, token, after);
  return recv(peer, token);
}

void ScheduleBuilder::send_up_recv_down_chunks(int parent, Slice up, Slice down, size_t chunk,
                                               size_t window) {
  std::vector<Range> pieces;
  for_each_chunk(up.count, chunk, [&](size_t off, size_t n) { pieces.push_back({off, n}); });
  window = std::max<size_t>(window, 1);
  size_t sent = 0;
  for (; sent < pieces.size() && sent < window; ++sent)
    send(parent, sub(up, pieces[sent].offset, pieces[sent].count));
  for (const Range& piece : pieces) {
    const StepId back = recv(parent, sub(down, piece.offset, piece.count));
    if (sent == pieces.size()) continue;
    const StepId after[] = {back};
    send(parent, sub(up, pieces[sent].offset, pieces[sent].count), after);
    ++sent;
  }
}

void ScheduleBuilder::recv_then_reduce_chunks(int peer, Slice dst, Slice own, size_t chunk) {
  for_each_chunk(dst.count, chunk, [&](size_t off, size_t n) {
    recv(peer, sub(dst, off, n));
    reduce(sub(own, off, n), sub(dst, off, n));
  });
}

Schedule ScheduleBuilder::finish() && { return std::move(sched_); }

// ---- staging ----

StagingRing::StagingRing(ScheduleBuilder& b, size_t slot_elems, size_t slots)
    : builder_(&b), slot_elems_(slot_elems), slots_(slots == 0 ? 1 : slots) {}

Slice StagingRing::take(size_t count) {
  if (count > slot_elems_) {
    throw invalid_usage("staging slot of " + std::to_string(slot_elems_) +
                        " elements asked for " + std::to_string(count) + " (builder bug)");
  }
  // Scratch is reserved on first use: a phase that never stages costs no memory.
  if (!base_) base_ = builder_->scratch(slot_elems_ * slots_);
  Slice s = sub(*base_, (next_ % slots_) * slot_elems_, count);
  ++next_;
  return s;
}

void recv_staged_reduce_chunks(ScheduleBuilder& b, int peer, Slice accum, StagingRing& ring,
                               size_t chunk) {
  for_each_chunk(accum.count, chunk, [&](size_t off, size_t n) {
    Slice slot = ring.take(n);
    b.recv(peer, slot);
    b.reduce(slot, sub(accum, off, n));
  });
}

bool recv_combine_chunks(ScheduleBuilder& b, int peer, Slice own, Slice acc, bool acc_holds_own,
                         StagingRing& ring, size_t chunk) {
  if (acc_holds_own)
    recv_staged_reduce_chunks(b, peer, acc, ring, chunk);
  else
    b.recv_then_reduce_chunks(peer, acc, own, chunk);
  return true;
}

void recv_reduce_chunks(ScheduleBuilder& b, int peer, Slice accum, StagingRing& ring,
                        size_t chunk) {
  for_each_chunk(accum.count, chunk, [&](size_t off, size_t n) {
    b.recv_reduce(peer, ring.take(n), sub(accum, off, n));
  });
}

}  // namespace plait::coll
