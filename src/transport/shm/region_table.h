// The registration table in a rank's segment: its regions as peers see them, so that a peer
// can check and pin a region and then copy into or out of it by cross-memory attach, without
// the owner's CPU (an RDMA NIC's memory translation table, done in software).
//
// A slot holds {key, addr, length, access}, a `state` word (generation << 2 | status), and
// one pin counter per peer (each peer touches only its own, so a dead peer's stuck pins can
// be told apart and ignored).
//
//   initiator   find the key (open addressing from key % slots), pins[me]++, re-read state:
//               unchanged means pinned; check bounds and access on the pinned fields (before
//               any byte is touched); copy; pins[me]--. A slot that changed is backed out of.
//   owner       publish: fill the fields of a free or retired slot, then store state with a
//               new generation (release). Remove: store state retired (seq_cst), then wait
//               until every live peer's pin counter is zero.
//
// The seq_cst pin increment and re-read on one side, and the seq_cst retire and pin read on
// the other, mean either the initiator sees the retirement or the owner sees the pin. Pins
// are held around one bounded copy (a chunk), so remove() waits for at most that long.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "transport/memory_registry.h"
#include "transport/shm/layout.h"

namespace plait::transport::shm {

// The owner's side: publishes the regions of a MemoryRegistry (as its listener).
class RegionPublisher final : public RegistryListener {
 public:
  // `peer_ranks[i]`: the rank of peer index i, for messages. `peer_gone(i)`: whether peer
  // index i's process has exited (its pins no longer count). Removal waits at most
  // `drain_timeout` for live peers' pins, then reports the holders (on_remove): a peer that
  // holds a pin that long is stopped or broken, and the memory must not be freed under it.
  RegionPublisher(SegmentView own, int rank, std::vector<int> peer_ranks,
                  std::function<bool(uint32_t)> peer_gone, std::chrono::milliseconds drain_timeout);

  void on_add(const RegionRef& region) override;
  std::string on_remove(const RegionRef& region) override;
  // Retires every slot and publishes nothing more (at shutdown): peers fall back to asking
  // us, and get refused. Before the listener is removed, so no region is left published
  // that a later deregistration would not retire. Waits for pins as on_remove does, for as
  // long as a live peer holds one (with an error log each time the bound passes).
  void retire_all();

 private:
  // Retires the slot and waits for its pins; empty once drained, else who holds them.
  std::string retire(uint64_t slot);

  SegmentView own_;
  const int rank_;
  const std::vector<int> peer_ranks_;
  std::function<bool(uint32_t)> peer_gone_;
  const std::chrono::milliseconds drain_timeout_;
  std::mutex mu_;
  std::unordered_map<uint64_t, uint64_t> slots_;     // key -> slot; guarded by mu_
  std::unordered_map<uint64_t, uint64_t> draining_;  // retired, pins still held; guarded by mu_
  std::unordered_set<uint64_t> draining_slots_;      // their slots: not reused until drained
  bool logged_full_ = false;
  bool closed_ = false;  // guarded by mu_
};

// A peer's region, pinned by us.
struct PinnedRegion {
  uint64_t slot = 0;
  uint64_t state = 0;  // the state we pinned; a later chunk re-pins only this generation
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;
};

// The initiator's side over a peer's table; `me` is our index in the peer's peer list.
class RemoteRegions {
 public:
  RemoteRegions() = default;
  RemoteRegions(SegmentView peer, uint32_t me) : peer_(peer), me_(me) {}

  // Pins `key`. False when the peer has not published it: it is not registered, or it did
  // not fit the table; the owner then decides (the request goes through the ring).
  bool pin(uint64_t key, PinnedRegion* out) const;
  // Pins the same region again for a later chunk; false once it has been retired.
  bool repin(const PinnedRegion& region) const;
  void unpin(const PinnedRegion& region) const;

 private:
  SegmentView peer_;
  uint32_t me_ = 0;
};

}  // namespace plait::transport::shm
