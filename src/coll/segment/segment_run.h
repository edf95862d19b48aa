// One collective over a communicator's collective segment (collective_segment.h): the
// "shm" algorithm of allreduce, reduce, broadcast, allgather, reduce_scatter and barrier.
//
// A collective is cut into rounds of at most one slot per rank. In each round a rank
//   1. waits until every rank has finished reading the buffers of this parity two rounds ago,
//   2. copies its contribution into its input slot and raises `arrive` (with the
//      collective's signature, which every reader checks: a rank in another collective is an
//      error naming it, not garbage),
//   3. reads what it needs once the ranks it needs have arrived:
//        - small reductions: every rank reduces all slots itself, straight into its output
//          (one flag exchange);
//        - larger ones: rank r reduces part r of the chunk into the shared output and raises
//          `reduced`, then every rank (reduce: the root) copies the whole chunk out;
//        - broadcast: the root's slot; allgather: every slot; reduce_scatter: its block of
//          every slot; barrier: nothing,
//   4. raises `done`: it will not read this round's buffers again.
// Every rank reduces in rank order, so all get bit-identical results.
//
// progress() never waits: it does what the flags allow and returns. Whoever drives the
// communicator's engine calls it; the engine enforces the deadline (waiting_for() says what
// is missing) and progress() checks now and then whether the rank it waits for has failed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coll/schedule/schedule.h"
#include "coll/schedule/signature.h"
#include "coll/segment/collective_segment.h"
#include "core/reduce.h"
#include "plait/error.h"
#include "transport/fabric.h"

namespace plait::coll::segment {

// Who the segment's ranks are: their health as the communicator's fabric sees it, and the
// names errors give them. A segment over one host of a larger communicator numbers that
// host's ranks 0.. (segment ranks); errors name communicator ranks.
struct PeerHealthView {
  const transport::Fabric* fabric = nullptr;
  const std::vector<int>* fabric_rank = nullptr;  // segment rank -> fabric rank
  const std::vector<int>* comm_rank = nullptr;    // segment rank -> communicator rank; null: same
};

class SegmentRun {
 public:
  // Starts the collective of `args` as rounds first_round, first_round + 1, ... (every rank
  // passes the same first round: the engine counts them per communicator). Does not touch
  // the segment yet. `args` must outlive the run (the engine's call holds it).
  void start(CollectiveSegment* seg, const CollArgs& args, void* input, void* output,
             uint64_t first_round, const Signature& signature, PeerHealthView health);
  // Advances as far as the flags allow; never waits. Returns true if it did anything.
  bool progress();

  bool done() const { return finished_ || error_ != nullptr; }
  const std::shared_ptr<const Error>& error() const { return error_; }
  // Rounds this collective takes (the same on every rank for the same call).
  uint64_t rounds() const { return rounds_; }
  // What the run waits for, e.g. "rank 2 to arrive at round 3 of 4 (allreduce over the
  // collective segment)".
  std::string waiting_for() const;
  // The communicator rank it waits for, or -1.
  int first_waited_peer() const { return blocked_on_ < 0 ? -1 : comm_rank(blocked_on_); }
  // Whether a peer may still be waiting for a flag of this rank's run: a later round, or
  // this one's arrive or share of a split reduction not published yet. A run that owes
  // nothing finishes in whichever thread looks next, however late, and holds nobody up.
  bool owes_peers() const;

  // How many rounds a call of this shape takes, with slots of `slot_bytes`.
  static uint64_t rounds_for(const CollArgs& args, uint64_t slot_bytes);
  // Whether a reduction round of `chunk_bytes` is split into parts, one reduced per rank
  // (else every rank reduces all of it): for 3 or more ranks, past 16 KiB or half a slot.
  static bool splits(const CollArgs& args, size_t chunk_bytes, uint64_t slot_bytes);

 private:
  enum class Phase : uint8_t { kClaim, kGather, kCollect, kFinished };

  void begin_round();
  bool step();  // one phase transition, if the flags allow it
  bool wait_all(std::atomic<uint64_t> RankControl::*flag, int only = -1);
  void note_blocked(int rank);
  bool signature_ok(int rank);
  void contribute();
  void consume();
  void collect();
  void finish_round();
  void reduce_slots(char* dst, size_t at, size_t n) const;
  void publish(std::atomic<uint64_t>& flag, CollectiveSegment::Waiters waiters);
  void fail(Error error);
  std::string waiting_round() const;

  int comm_rank(int segment_rank) const {
    return health_.comm_rank ? (*health_.comm_rank)[static_cast<size_t>(segment_rank)] : segment_rank;
  }
  // This round reduces in parts (one per rank) rather than every rank reducing it all.
  // Inline, two ranks first: they never split, and every round asks.
  bool split() const {
    return args_->size > 2 && splits(*args_, count_ * elem_, seg_->slot_bytes());
  }

  CollectiveSegment* seg_ = nullptr;
  const CollArgs* args_ = nullptr;  // the call's, which outlives the run
  char* in_ = nullptr;
  char* out_ = nullptr;
  size_t elem_ = 0;
  ReduceOp redop_ = ReduceOp::kSum;
  // The reduction's kernel, resolved when the dtype, op or size class changes (a loop of
  // collectives resolves it once).
  CombineFn combine_ = nullptr;
  DataType combine_dtype_ = DataType::kF32;
  ReduceOp combine_op_ = ReduceOp::kSum;
  bool combine_few_ = false;
  uint64_t signature_ = 0;
  Signature sig_;
  PeerHealthView health_;

  uint64_t first_round_ = 0;
  uint64_t rounds_ = 0;
  size_t chunk_ = 0;    // elements a round carries (per block for reduce_scatter)
  uint64_t index_ = 0;  // the round in progress, 0-based
  size_t offset_ = 0;   // its first element (per block for allgather / reduce_scatter)
  size_t count_ = 0;    // its element count
  Phase phase_ = Phase::kFinished;
  int next_ = 0;          // first rank whose flag the current wait has not seen yet
  int blocked_on_ = -1;   // the rank the last wait stopped at
  const char* blocked_what_ = "arrive at";  // a static text: set on every blocked poll
  bool finished_ = true;
  std::shared_ptr<const Error> error_;
  // The last round in which this rank saw every rank arrive; kept from one collective to
  // the next. A rank raises arrive for round R only after done for R - 1, so a round whose
  // predecessor everybody arrived at needs no look at anybody's done flag to reuse buffers.
  uint64_t all_arrived_round_ = 0;
};

}  // namespace plait::coll::segment
