// A communicator's collective segment: one shared-memory mapping that every rank of a
// communicator whose ranks all share a host maps, for collectives without messages (the
// "shm" algorithms, segment_run.h). Ranks copy their data into their own input slots, raise
// flags, and read each other's slots and one shared output area with plain loads and
// stores; no rendezvous, no provider, no system call while everybody is polling.
//
// Layout (geometry below; every size and offset comes from the private Geometry, never
// from the header, which any rank can rewrite):
//
//   Header               magic, version, creator pid (the sweep's stamp, segment.h), ranks,
//                        slot bytes, a random tag that the creator also publishes in the store
//   RankControl[ranks]   per rank, three cache lines: what it published (arrive, reduced and
//                        the signature of each parity), what it has finished reading (done)
//                        and the round it waits on, and how to wake it (doorbell)
//   input[ranks][2]      per rank and round parity: its contribution to a round
//   output[2]            per round parity: the shared result of a split reduction
//
// Rounds: every collective runs as one or more rounds, numbered 1, 2, ... per communicator;
// round R uses the buffers of parity R % 2. A rank writes a parity's buffers for round R
// only once every rank has finished reading them for round R - 2 (done >= R - 2, implied by
// arrive >= R - 1).
//
// Waking: a rank's engine thread may sleep on its doorbell (`bell`) when it has a round in
// progress; whoever publishes a flag rings the bell of every rank that sleeps, waits for that
// flag, and asks to be rung (`ring_after`, wake_sleepers()). While some thread of a rank
// polls, the rank asks not to be rung: the steady state of a loop of collectives makes no
// system call, and the words a publisher reads stay unwritten (no cache line moves between
// cores for them). A call's submitter that leaves before its collective is done is about to
// wait, and poll: it asks not to be rung for a grace period, or not at all when nothing it
// still owes its peers can be held up (the last round, its share published).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/clock.h"
#include "core/shared_memory.h"
#include "plait/store.h"

namespace plait::coll::segment {

// Starts a SharedMemoryHeader (core/shared_memory.h), as every plait mapping does.
inline constexpr uint64_t kMagic = 0x316c6c6f63746c70ull;  // "pltcoll1"
inline constexpr uint32_t kVersion = 2;
inline constexpr size_t kTagSize = 16;
// No round is in progress on a rank (RankControl::active_round).
inline constexpr uint64_t kNoRound = UINT64_MAX;
// RankControl::ring_after: ring now (nobody of the rank polls), and never (a thread polls).
inline constexpr int64_t kRingNow = 0;
inline constexpr int64_t kRingNever = INT64_MAX;

struct Header {
  std::atomic<uint64_t> magic{0};  // kMagic, written last
  uint32_t version = 0;
  int32_t pid = 0;  // the creator's: the sweep removes a segment whose creator died in setup
  uint32_t ranks = 0;
  uint32_t reserved = 0;
  uint64_t slot_bytes = 0;
  uint64_t total_bytes = 0;
  uint8_t tag[kTagSize] = {};
};

struct RankControl {
  // Written by the rank: the round it has contributed to, the last round whose share of a
  // split reduction it has written, and the signature of the collective of each parity
  // (written before the flag that makes it visible).
  alignas(64) std::atomic<uint64_t> arrive{0};
  std::atomic<uint64_t> reduced{0};
  std::atomic<uint64_t> signature[2] = {};
  // Written by the rank: the last round whose shared buffers it has finished reading, and the
  // round it waits on (kNoRound: none).
  alignas(64) std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> active_round{kNoRound};
  // Who wakes the rank's engine thread. Written by the rank only when that changes (its
  // engine thread goes to sleep or wakes; a thread starts or stops polling with a round in
  // progress), so publishers read them from their own cache in a loop of collectives.
  // `ring_after`: kRingNow, kRingNever, or the steady-clock time (ns) at which a submitter's
  // grace as a poller ends. `bell`: bumped by the others to wake the thread (a futex).
  alignas(64) std::atomic<uint32_t> sleeping{0};
  std::atomic<uint32_t> bell{0};
  std::atomic<int64_t> ring_after{kRingNow};
};
static_assert(sizeof(RankControl) == 192);
// It starts as every plait mapping does (core/shared_memory.h), which the sweep reads.
static_assert(offsetof(Header, version) == offsetof(SharedMemoryHeader, version) &&
              offsetof(Header, pid) == offsetof(SharedMemoryHeader, pid));

struct Geometry {
  uint32_t ranks = 0;
  uint64_t slot_bytes = 0;
  uint64_t control_offset = 0;
  uint64_t input_offset = 0;
  uint64_t output_offset = 0;
  uint64_t total_bytes = 0;
};
// Slot sizes are a multiple of 4 KiB (every element type, every cache line aligned).
Geometry plan_geometry(uint32_t ranks, uint64_t slot_bytes);

class CollectiveSegment {
 public:
  // Collective over the `size` ranks of a communicator, all on this host: rank 0 creates and
  // publishes the segment under `key` in the communicator's store, the others map and verify
  // it, and it is unlinked once every rank has (a crash afterwards leaves nothing behind).
  // Null on every rank when rank 0 cannot create it (a full /dev/shm, say: rank 0 logs why
  // and the communicator runs on messages). Throws plait::Error naming what failed, by
  // `deadline`, for anything else.
  static std::unique_ptr<CollectiveSegment> attach(int rank, int size, Store& store,
                                                   const std::string& key, uint64_t slot_bytes,
                                                   const Deadline& deadline);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(g_.ranks); }
  uint64_t slot_bytes() const { return g_.slot_bytes; }

  RankControl& control(int rank) const { return controls_[rank]; }
  RankControl& own() const { return controls_[rank_]; }
  char* input(int rank, uint64_t round) const {
    return inputs_ + (static_cast<uint64_t>(rank) * 2 + round % 2) * g_.slot_bytes;
  }
  char* output(uint64_t round) const { return outputs_ + (round % 2) * g_.slot_bytes; }

  // Who a published flag of `round` can unblock: ranks still in that round (arrive,
  // reduced), or ranks that want to reuse its buffers two rounds later (done).
  enum class Waiters { kSameRound, kReuse };
  // After publishing a flag of `round`: rings every rank whose engine thread sleeps on its
  // bell with a round in progress that `waiters` says the flag can unblock, and which asks
  // to be rung. Inline up to the words that a loop of collectives never writes (a rank that
  // polls is passed over without a call).
  void wake_sleepers(uint64_t round, Waiters waiters) const {
    for (uint32_t r = 0; r < g_.ranks; ++r) {
      if (static_cast<int>(r) == rank_) continue;
      const RankControl& c = controls_[r];
      if (c.sleeping.load(std::memory_order_seq_cst) == 0) continue;
      const int64_t after = c.ring_after.load(std::memory_order_seq_cst);
      if (after != kRingNever) ring_if_waiting(static_cast<int>(r), after, round, waiters);
    }
  }

 private:
  CollectiveSegment(int rank, SharedMemory segment, const Geometry& g)
      : rank_(rank),
        segment_(std::move(segment)),
        g_(g),
        controls_(reinterpret_cast<RankControl*>(segment_.base() + g_.control_offset)),
        inputs_(segment_.base() + g_.input_offset),
        outputs_(segment_.base() + g_.output_offset) {}
  // Every rank: says it has mapped the segment; rank 0 waits for all, then unlinks it.
  static std::unique_ptr<CollectiveSegment> finish_attach(int rank, int size, Store& store,
                                                          const std::string& key,
                                                          SharedMemory segment,
                                                          const Geometry& g,
                                                          const Deadline& deadline);

  // The rest of wake_sleepers() for rank `r`, asleep, which asked to be rung `after`.
  void ring_if_waiting(int r, int64_t after, uint64_t round, Waiters waiters) const;

  int rank_;
  SharedMemory segment_;
  Geometry g_;
  // Where the geometry puts each area in our mapping: every flag and slot access uses them.
  RankControl* controls_;
  char* inputs_;
  char* outputs_;
};

}  // namespace plait::coll::segment
