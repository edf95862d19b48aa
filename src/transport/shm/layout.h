// What a rank's shared-memory segment holds, and where. Every rank creates one segment; its
// peers map it and write into it; it is unlinked as soon as they all have (setup.cc).
//
//   SegmentHeader        identity (rank, pid, token tag), geometry, the CMA probe, and the
//                        progress engine's shared words (doorbell, sleeping, pollers, closed)
//   int32 peer_ranks[P]  the ranks this owner serves, in the order of its rings and pins
//   u32 cma_state[P]     the owner's CMA probe result against each peer (CmaState)
//   rings[P]             the owner's inboxes: ring i is written by peer_ranks[i] only
//   slots[S]             the registration table: the owner's regions that peers may access
//                        by cross-memory attach (region_table.h), with one pin counter per peer
//
// Peers trust only what they verify, once, at setup: the magic and version, the token tag,
// the rank and size, and a geometry whose every offset lies inside the segment they mapped;
// from then on they use their private copy of the geometry (SegmentView), never the header's.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/shared_memory.h"
#include "transport/shm/ring.h"

namespace plait::transport::shm {

inline constexpr uint64_t kSegmentMagic = 0x316d737469616c70ull;  // "plaitsm1"
inline constexpr uint32_t kLayoutVersion = 2;
inline constexpr size_t kTagBytes = 32;  // HMAC-SHA256

enum CmaState : uint32_t {
  kCmaUnknown = 0,
  kCmaWorks = 1,     // process_vm_readv of the peer's probe word returned its value
  kCmaFails = 2,     // it did not (errno in the owner's log)
  kCmaDisabled = 3,  // PLAIT_SHM_CMA=off on the owner
};

struct SegmentHeader {
  std::atomic<uint64_t> magic{0};  // written last at creation: the rest is then valid
  uint32_t version = 0;
  int32_t pid = 0;
  int32_t rank = -1;
  int32_t size = 0;
  uint32_t peer_count = 0;
  uint32_t reserved = 0;
  uint64_t total_bytes = 0;
  uint64_t ring_capacity = 0;
  uint64_t peers_offset = 0;
  uint64_t cma_offset = 0;
  uint64_t rings_offset = 0;
  uint64_t ring_stride = 0;
  uint64_t table_offset = 0;
  uint64_t table_slots = 0;
  uint64_t slot_stride = 0;
  uint64_t probe_addr = 0;   // a word in the owner's private memory...
  uint64_t probe_value = 0;  // ...that holds this value: peers read it by CMA
  uint8_t tag[kTagBytes] = {};  // proves the creator knows the job token

  // Bumped by whoever wants the owner's progress thread awake (futex word).
  alignas(64) std::atomic<uint32_t> doorbell{0};
  // Written by the owner, read by every producer on each send: a line of their own.
  alignas(64) std::atomic<uint32_t> sleeping{0};  // the progress thread is (about to be) asleep
  std::atomic<uint32_t> pollers{0};   // threads progressing inline: nobody needs the doorbell
  std::atomic<uint32_t> closed{0};    // the owner shut its fabric down (after its last record)
  // Written before `closed` is set: why the owner lost its first peer, if it did
  // (OpLifecycle::first_loss), NUL-terminated; read by peers once they see `closed`.
  char first_loss[1024] = {};
};
// It starts as every plait mapping does (core/shared_memory.h), which the sweep reads.
static_assert(offsetof(SegmentHeader, version) == offsetof(SharedMemoryHeader, version) &&
              offsetof(SegmentHeader, pid) == offsetof(SharedMemoryHeader, pid));

// One published region (region_table.h). Fields are atomics because peers read them while
// the owner may be rewriting a retired slot; `state` orders them, seqlock-style.
struct RegionSlot {
  std::atomic<uint64_t> state{0};  // generation << 2 | SlotStatus
  std::atomic<uint64_t> key{0};
  std::atomic<uint64_t> addr{0};
  std::atomic<uint64_t> length{0};
  std::atomic<uint32_t> access{0};
};
inline constexpr size_t kSlotPinsOffset = 64;  // then std::atomic<uint32_t> pins[P]
static_assert(sizeof(RegionSlot) <= kSlotPinsOffset);

enum SlotStatus : uint64_t { kSlotNeverUsed = 0, kSlotPublished = 1, kSlotRetired = 2 };

struct Geometry {
  uint32_t peer_count = 0;
  uint64_t ring_capacity = 0;
  uint64_t peers_offset = 0, cma_offset = 0;
  uint64_t rings_offset = 0, ring_stride = 0;
  uint64_t table_offset = 0, table_slots = 0, slot_stride = 0;
  uint64_t total_bytes = 0;
};

inline constexpr uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// The layout for `peers` inboxes of `ring_capacity` bytes (a power of two) and a table of
// `table_slots` regions.
inline Geometry make_geometry(uint32_t peers, uint64_t ring_capacity, uint64_t table_slots) {
  Geometry g;
  g.peer_count = peers;
  g.ring_capacity = ring_capacity;
  g.peers_offset = align_up(sizeof(SegmentHeader), 64);
  g.cma_offset = align_up(g.peers_offset + 4ull * peers, 64);
  g.rings_offset = align_up(g.cma_offset + 4ull * peers, 4096);
  g.ring_stride = kRingControlBytes + ring_capacity;
  g.table_offset = align_up(g.rings_offset + g.ring_stride * peers, 4096);
  g.table_slots = table_slots;
  g.slot_stride = align_up(kSlotPinsOffset + 4ull * peers, 64);
  g.total_bytes = align_up(g.table_offset + g.slot_stride * table_slots, 4096);
  return g;
}

// Writes a segment's identity and layout into its header (all but pid, probe, tag, magic):
// the fields check_peer_segment() compares against the geometry it recomputes.
inline void write_layout(SegmentHeader& h, int32_t rank, int32_t size, const Geometry& g) {
  h.version = kLayoutVersion;
  h.rank = rank;
  h.size = size;
  h.peer_count = g.peer_count;
  h.total_bytes = g.total_bytes;
  h.ring_capacity = g.ring_capacity;
  h.peers_offset = g.peers_offset;
  h.cma_offset = g.cma_offset;
  h.rings_offset = g.rings_offset;
  h.ring_stride = g.ring_stride;
  h.table_offset = g.table_offset;
  h.table_slots = g.table_slots;
  h.slot_stride = g.slot_stride;
}

// Typed access to a mapped segment, ours or a peer's. Every offset and size comes from a
// Geometry in private memory (ours as planned; a peer's as verified once at setup), never from
// the header: a peer can rewrite the header at any time, and a size or offset read from it
// after the check would steer our accesses. header() is for the shared words only.
class SegmentView {
 public:
  SegmentView() = default;
  SegmentView(char* base, const Geometry& geometry) : base_(base), g_(geometry) {}

  const Geometry& geometry() const { return g_; }
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  int32_t* peer_ranks() const { return reinterpret_cast<int32_t*>(base_ + g_.peers_offset); }
  std::atomic<uint32_t>& cma_state(uint32_t i) const {
    return reinterpret_cast<std::atomic<uint32_t>*>(base_ + g_.cma_offset)[i];
  }
  RingControl* ring_control(uint32_t i) const {
    return reinterpret_cast<RingControl*>(base_ + g_.rings_offset + i * g_.ring_stride);
  }
  char* ring_data(uint32_t i) const { return reinterpret_cast<char*>(ring_control(i)) + kRingControlBytes; }
  RegionSlot& slot(uint64_t s) const {
    return *reinterpret_cast<RegionSlot*>(base_ + g_.table_offset + s * g_.slot_stride);
  }
  std::atomic<uint32_t>& pins(uint64_t s, uint32_t peer_index) const {
    return reinterpret_cast<std::atomic<uint32_t>*>(reinterpret_cast<char*>(&slot(s)) +
                                                    kSlotPinsOffset)[peer_index];
  }
  explicit operator bool() const { return base_ != nullptr; }

 private:
  char* base_ = nullptr;
  Geometry g_;
};

}  // namespace plait::transport::shm
