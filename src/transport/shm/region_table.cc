#include "transport/shm/region_table.h"

#include <sched.h>

#include <thread>

#include "core/clock.h"
#include "core/log.h"

namespace plait::transport::shm {
namespace {

uint64_t status_of(uint64_t state) { return state & 3; }
uint64_t generation_of(uint64_t state) { return state >> 2; }
uint64_t make_state(uint64_t generation, uint64_t status) { return generation << 2 | status; }

}  // namespace

RegionPublisher::RegionPublisher(SegmentView own, int rank, std::vector<int> peer_ranks,
                                 std::function<bool(uint32_t)> peer_gone,
                                 std::chrono::milliseconds drain_timeout)
    : own_(own),
      rank_(rank),
      peer_ranks_(std::move(peer_ranks)),
      peer_gone_(std::move(peer_gone)),
      drain_timeout_(drain_timeout) {}

void RegionPublisher::on_add(const RegionRef& region) {
  const uint64_t slots = own_.geometry().table_slots;
  std::lock_guard lock(mu_);
  if (closed_ || slots == 0 || slots_.count(region->key())) return;
  for (uint64_t i = 0; i < slots; ++i) {
    const uint64_t s = (region->key() + i) % slots;
    RegionSlot& slot = own_.slot(s);
    const uint64_t state = slot.state.load(std::memory_order_relaxed);
    if (status_of(state) == kSlotPublished || draining_slots_.count(s)) continue;
    // Only we write a slot; peers that read it now see a state that is not (yet) published
    // with the new generation, and back out.
    slot.key.store(region->key(), std::memory_order_relaxed);
    slot.addr.store(reinterpret_cast<uintptr_t>(region->base()), std::memory_order_relaxed);
    slot.length.store(region->length(), std::memory_order_relaxed);
    slot.access.store(region->access(), std::memory_order_relaxed);
    slot.state.store(make_state(generation_of(state) + 1, kSlotPublished),
                     std::memory_order_release);
    slots_.emplace(region->key(), s);
    return;
  }
  // Peers do not find the key and send their requests to us instead (slower, still right).
  if (!logged_full_)
    log(LogLevel::kInfo, "rank ", rank_, ": shm registration table full (", slots,
        " regions): further regions are served by this rank's progress thread");
  logged_full_ = true;
}

std::string RegionPublisher::on_remove(const RegionRef& region) {
  std::lock_guard lock(mu_);
  uint64_t slot;
  if (auto it = slots_.find(region->key()); it != slots_.end()) {
    slot = it->second;
    slots_.erase(it);
  } else if (auto again = draining_.find(region->key()); again != draining_.end()) {
    slot = again->second;
    draining_.erase(again);
    draining_slots_.erase(slot);
  } else {
    return {};  // never published (the table was full)
  }
  std::string held = retire(slot);
  if (!held.empty()) {
    draining_.emplace(region->key(), slot);
    draining_slots_.insert(slot);
  }
  return held;
}

void RegionPublisher::retire_all() {
  std::lock_guard lock(mu_);
  closed_ = true;
  for (auto* table : {&slots_, &draining_}) {
    for (const auto& [key, slot] : *table) {
      // At shutdown nobody can be told to keep the memory: wait for as long as it is used.
      for (std::string held = retire(slot); !held.empty(); held = retire(slot))
        log(LogLevel::kError, "rank ", rank_, ": shutting down: key ", format_key(key), ": ",
            held, "; waiting on");
    }
    table->clear();
  }
  draining_slots_.clear();
}

std::string RegionPublisher::retire(uint64_t s) {
  RegionSlot& slot = own_.slot(s);
  const uint64_t state = slot.state.load(std::memory_order_relaxed);
  if (status_of(state) != kSlotRetired)
    slot.state.store(make_state(generation_of(state), kSlotRetired), std::memory_order_seq_cst);
  const uint32_t peers = own_.geometry().peer_count;
  const Deadline deadline = Deadline::after(drain_timeout_);
  for (unsigned round = 0;; ++round) {
    std::string holders;
    for (uint32_t p = 0; p < peers; ++p)
      if (own_.pins(s, p).load(std::memory_order_seq_cst) != 0 && !peer_gone_(p))
        holders += (holders.empty() ? "rank " : ", rank ") + std::to_string(peer_ranks_[p]);
    if (holders.empty()) return {};
    if (deadline.expired())
      return holders + " still accesses the region after " +
             std::to_string(drain_timeout_.count()) + " ms (stopped or stuck?)";
    // A pin lasts one chunk's copy (well under a millisecond); then back off.
    if (round < 64)
      sched_yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool RemoteRegions::pin(uint64_t key, PinnedRegion* out) const {
  const uint64_t slots = peer_.geometry().table_slots;
  for (uint64_t i = 0; i < slots; ++i) {
    const uint64_t s = (key + i) % slots;
    RegionSlot& slot = peer_.slot(s);
    const uint64_t state = slot.state.load(std::memory_order_acquire);
    if (status_of(state) == kSlotNeverUsed) return false;  // the end of key's probe sequence
    if (status_of(state) != kSlotPublished || slot.key.load(std::memory_order_relaxed) != key)
      continue;
    PinnedRegion r;
    r.slot = s;
    r.state = state;
    if (!repin(r)) return false;  // retired meanwhile: the key is on its way out
    // Stable now: the owner rewrites a slot only after its pins drained.
    r.addr = slot.addr.load(std::memory_order_relaxed);
    r.length = slot.length.load(std::memory_order_relaxed);
    r.access = slot.access.load(std::memory_order_relaxed);
    *out = r;
    return true;
  }
  return false;
}

bool RemoteRegions::repin(const PinnedRegion& r) const {
  std::atomic<uint32_t>& pins = peer_.pins(r.slot, me_);
  pins.fetch_add(1, std::memory_order_seq_cst);
  if (peer_.slot(r.slot).state.load(std::memory_order_seq_cst) == r.state) return true;
  pins.fetch_sub(1, std::memory_order_release);
  return false;
}

void RemoteRegions::unpin(const PinnedRegion& r) const {
  peer_.pins(r.slot, me_).fetch_sub(1, std::memory_order_release);
}

}  // namespace plait::transport::shm
