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

RegionPublisher::RegionPublisher(SegmentView own, int rank,
                                 std::function<bool(uint32_t)> peer_gone,
                                 std::chrono::milliseconds drain_timeout)
    : own_(own), rank_(rank), peer_gone_(std::move(peer_gone)), drain_timeout_(drain_timeout) {}

void RegionPublisher::on_add(const RegionRef& region) {
  const uint64_t slots = own_.header().table_slots;
  std::lock_guard lock(mu_);
  if (closed_ || slots == 0 || slots_.count(region->key())) return;
  for (uint64_t i = 0; i < slots; ++i) {
    const uint64_t s = (region->key() + i) % slots;
    RegionSlot& slot = own_.slot(s);
    const uint64_t state = slot.state.load(std::memory_order_relaxed);
    if (status_of(state) == kSlotPublished) continue;
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

void RegionPublisher::on_remove(const RegionRef& region) {
  std::lock_guard lock(mu_);
  auto it = slots_.find(region->key());
  if (it == slots_.end()) return;
  retire(it->second);
  slots_.erase(it);
}

void RegionPublisher::retire_all() {
  std::lock_guard lock(mu_);
  closed_ = true;
  for (const auto& [key, slot] : slots_) retire(slot);
  slots_.clear();
}

void RegionPublisher::retire(uint64_t s) {
  RegionSlot& slot = own_.slot(s);
  const uint64_t state = slot.state.load(std::memory_order_relaxed);
  slot.state.store(make_state(generation_of(state), kSlotRetired), std::memory_order_seq_cst);
  const uint32_t peers = own_.header().peer_count;
  const Deadline deadline = Deadline::after(drain_timeout_);
  for (unsigned round = 0;; ++round) {
    bool drained = true;
    for (uint32_t p = 0; p < peers && drained; ++p)
      drained = own_.pins(s, p).load(std::memory_order_seq_cst) == 0 || peer_gone_(p);
    if (drained) return;
    if (deadline.expired()) {
      log(LogLevel::kError, "rank ", rank_, ": deregistering key ", format_key(slot.key.load()),
          ": a peer still accesses it after ", drain_timeout_.count(),
          " ms (stopped or stuck?); giving up the wait");
      return;
    }
    // A pin lasts one chunk's copy (well under a millisecond); then back off.
    if (round < 64)
      sched_yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool RemoteRegions::pin(uint64_t key, PinnedRegion* out) const {
  const uint64_t slots = peer_.header().table_slots;
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
