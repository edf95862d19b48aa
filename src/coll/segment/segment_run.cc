#include "coll/segment/segment_run.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <sstream>

#include "core/reduce.h"

namespace plait::coll::segment {
namespace {

// Up to this many bytes per round (or half a slot) every rank reduces all slots itself: one
// flag exchange instead of two, at the price of reading p slots instead of one part of each.
constexpr size_t kDirectBytes = 16 << 10;

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Elements one round carries: per rank, or per block for reduce_scatter.
size_t per_round(const CollArgs& args, uint64_t slot_bytes) {
  // Element sizes are powers of two: a shift, not a division (tens of cycles per call).
  const size_t per = static_cast<size_t>(slot_bytes >> std::countr_zero(dtype_size(args.dtype)));
  return args.op == CollOp::kReduceScatter ? std::max<size_t>(1, per / static_cast<size_t>(args.size))
                                           : per;
}

// Rounds of `chunk` elements each (a barrier carries none, in one round).
uint64_t rounds_of(const CollArgs& args, size_t chunk) {
  if (args.op == CollOp::kBarrier || args.count <= chunk) return 1;  // small: no division
  return ceil_div(args.count, chunk);
}

}  // namespace

uint64_t SegmentRun::rounds_for(const CollArgs& args, uint64_t slot_bytes) {
  return rounds_of(args, per_round(args, slot_bytes));
}

void SegmentRun::start(CollectiveSegment* seg, const CollArgs& args, void* input, void* output,
                       uint64_t first_round, const Signature& signature, PeerHealthView health) {
  seg_ = seg;
  args_ = &args;
  in_ = static_cast<char*>(input);
  out_ = static_cast<char*>(output);
  elem_ = dtype_size(args.dtype);
  redop_ = args.redop == ReduceOp::kAvg ? ReduceOp::kSum : args.redop;  // divided afterwards
  if (args.op == CollOp::kAllreduce || args.op == CollOp::kReduce ||
      args.op == CollOp::kReduceScatter) {
    const bool few = args.count <= kFewElements;
    if (!combine_ || args.dtype != combine_dtype_ || redop_ != combine_op_ || few != combine_few_) {
      combine_ = combine_kernel(args.dtype, redop_, few);
      combine_dtype_ = args.dtype;
      combine_op_ = redop_;
      combine_few_ = few;
    }
  }
  sig_ = signature;
  signature_ = signature.pack();
  health_ = health;
  first_round_ = first_round;
  chunk_ = per_round(args, seg->slot_bytes());
  rounds_ = rounds_of(args, chunk_);
  index_ = 0;
  finished_ = false;
  error_.reset();
  blocked_on_ = -1;
  begin_round();
}

bool SegmentRun::splits(const CollArgs& args, size_t chunk_bytes, uint64_t slot_bytes) {
  return (args.op == CollOp::kAllreduce || args.op == CollOp::kReduce) && args.size > 2 &&
         chunk_bytes > std::min<size_t>(kDirectBytes, slot_bytes / 2);
}

bool SegmentRun::owes_peers() const {
  if (done()) return false;
  if (index_ + 1 < rounds_ || phase_ == Phase::kClaim) return true;
  return phase_ == Phase::kGather && split();  // `reduced` comes after the gather
}


void SegmentRun::begin_round() {
  offset_ = static_cast<size_t>(index_) * chunk_;
  count_ = args_->op == CollOp::kBarrier ? 0 : std::min(chunk_, args_->count - std::min(args_->count, offset_));
  phase_ = Phase::kClaim;
  next_ = 0;
  // Publishers read it to decide whether to ring us, after their flag: a rank they may ring
  // must order it before its own loads of their flags (a full fence). A rank that asks
  // never to be rung fences when it stops asking (CommEngine::end_driving).
  RankControl& own = seg_->own();
  own.active_round.store(first_round_ + index_,
                         own.ring_after.load(std::memory_order_relaxed) == kRingNever
                             ? std::memory_order_release
                             : std::memory_order_seq_cst);
}

bool SegmentRun::progress() {
  bool any = false;
  while (!done() && step()) any = true;
  return any;
}

bool SegmentRun::step() {
  const uint64_t round = first_round_ + index_;
  switch (phase_) {
    case Phase::kClaim:
      // This parity's buffers were last read in round - 2: by everybody, once they say so
      // (or once they have all arrived at round - 1, which they do only after that).
      if (round > 2 && all_arrived_round_ + 1 < round && !wait_all(&RankControl::done))
        return false;
      contribute();
      return true;
    case Phase::kGather: {
      // A broadcast's receivers need the root only; the root waits for everyone, which is
      // how a rank that disagrees about the root is found (nobody else reads its signature).
      const int only = args_->op == CollOp::kBroadcast && seg_->rank() != args_->root ? args_->root : -1;
      if (!wait_all(&RankControl::arrive, only)) return false;
      consume();
      return true;
    }
    case Phase::kCollect:
      if (!wait_all(&RankControl::reduced)) return false;
      collect();
      return true;
    case Phase::kFinished: return false;
  }
  return false;
}

// Whether every rank (or `only`) has raised `flag` to the current wait's round; resumes where
// the last call stopped. Arrivals are checked against our signature as they are seen.
bool SegmentRun::wait_all(std::atomic<uint64_t> RankControl::*flag, int only) {
  const uint64_t round = first_round_ + index_;
  const uint64_t want = flag == &RankControl::done ? round - 2 : round;
  const int size = args_->size;
  for (; next_ < size; ++next_) {
    const int q = only >= 0 ? only : next_;
    if (q != seg_->rank() && (seg_->control(q).*flag).load(std::memory_order_acquire) < want) {
      blocked_what_ = flag == &RankControl::arrive    ? "arrive at"
                      : flag == &RankControl::reduced ? "reduce its part of"
                                                      : "finish reading";
      note_blocked(q);
      return false;
    }
    if (flag == &RankControl::arrive && q != seg_->rank() && !signature_ok(q)) return false;
    if (only >= 0) break;
  }
  if (flag == &RankControl::arrive && only < 0) all_arrived_round_ = round;
  next_ = 0;
  blocked_on_ = -1;
  return true;
}

// Not there yet: is the rank we wait for still alive? (An atomic load in the provider: cheap
// enough for every blocked poll, and the engine thread is woken by a peer's death anyway,
// through its control receive, so it must not need many polls to notice.)
void SegmentRun::note_blocked(int rank) {
  blocked_on_ = rank;
  if (!health_.fabric) return;
  const int fabric_rank = (*health_.fabric_rank)[static_cast<size_t>(rank)];
  if (!health_.fabric->peer_failed(fabric_rank)) return;
  // The provider names the job's (fabric) rank; say which one it is where they differ, as
  // in a communicator split, subgrouped or shrunk from the world.
  const int peer = comm_rank(rank);
  const std::string job_rank =
      peer == fabric_rank ? "" : " (rank " + std::to_string(fabric_rank) + " of the job)";
  fail(remote_error("rank " + std::to_string(peer) + job_rank + " failed while this rank waited for it to " +
                        std::string(blocked_what_) + " " + waiting_round() + ": " +
                        health_.fabric->peer_failure(fabric_rank),
                    {.rank = comm_rank(args_->rank), .peer = peer}));
}

bool SegmentRun::signature_ok(int rank) {
  const uint64_t round = first_round_ + index_;
  const uint64_t theirs = seg_->control(rank).signature[round % 2].load(std::memory_order_relaxed);
  if (theirs == signature_) return true;
  fail(invalid_usage(mismatch_message(sig_, theirs, comm_rank(rank)),
                     {.rank = comm_rank(args_->rank), .peer = comm_rank(rank)}));
  return false;
}

void SegmentRun::contribute() {
  const uint64_t round = first_round_ + index_;
  const int me = seg_->rank();
  char* slot = seg_->input(me, round);
  const size_t bytes = count_ * elem_;
  const size_t at = offset_ * elem_;
  bool reads_nothing = false;  // this rank takes nothing from the segment this round
  switch (args_->op) {
    case CollOp::kAllreduce:
    case CollOp::kAllgather: std::memcpy(slot, in_ + at, bytes); break;
    case CollOp::kReduce:
      std::memcpy(slot, in_ + at, bytes);
      reads_nothing = me != args_->root && !split();
      break;
    case CollOp::kBroadcast:
      if (me == args_->root) {
        std::memcpy(slot, in_ + at, bytes);
        if (out_ != in_) std::memcpy(out_ + at, in_ + at, bytes);
      }
      break;
    case CollOp::kReduceScatter:
      for (int b = 0; b < args_->size; ++b)
        std::memcpy(slot + static_cast<size_t>(b) * bytes,
                    in_ + (static_cast<size_t>(b) * args_->count + offset_) * elem_, bytes);
      break;
    default: break;  // barrier: nothing to carry
  }
  RankControl& own = seg_->own();
  own.signature[round % 2].store(signature_, std::memory_order_relaxed);
  publish(own.arrive, CollectiveSegment::Waiters::kSameRound);
  if (reads_nothing) return finish_round();
  phase_ = Phase::kGather;
  next_ = 0;
}

// dst[0, n) = the reduction, in rank order, of every rank's slot at byte offset `at`.
void SegmentRun::reduce_slots(char* dst, size_t at, size_t n) const {
  const uint64_t round = first_round_ + index_;
  if (args_->size == 1) {
    std::memcpy(dst, seg_->input(0, round) + at, n * elem_);
    return;
  }
  if (n == 0) return;
  combine_(dst, seg_->input(0, round) + at, seg_->input(1, round) + at, n);
  for (int q = 2; q < args_->size; ++q) combine_(dst, dst, seg_->input(q, round) + at, n);
}

void SegmentRun::consume() {
  const uint64_t round = first_round_ + index_;
  const int me = seg_->rank();
  const size_t bytes = count_ * elem_;
  const size_t at = offset_ * elem_;
  switch (args_->op) {
    case CollOp::kAllreduce:
    case CollOp::kReduce:
      if (split()) {
        // Part `me` of the chunk, aligned to cache lines so that no two ranks write one line.
        const size_t unit = std::max<size_t>(1, 64 / elem_);
        const size_t per = ceil_div(ceil_div(count_, static_cast<size_t>(args_->size)), unit) * unit;
        const size_t lo = std::min(count_, static_cast<size_t>(me) * per);
        const size_t hi = std::min(count_, lo + per);
        if (hi > lo) reduce_slots(seg_->output(round) + lo * elem_, lo * elem_, hi - lo);
        publish(seg_->own().reduced, CollectiveSegment::Waiters::kSameRound);
        if (args_->op == CollOp::kReduce && me != args_->root) return finish_round();
        phase_ = Phase::kCollect;
        next_ = 0;
        return;
      }
      reduce_slots(out_ + at, 0, count_);
      break;
    case CollOp::kBroadcast:
      if (me != args_->root) std::memcpy(out_ + at, seg_->input(args_->root, round), bytes);
      break;
    case CollOp::kAllgather:
      for (int q = 0; q < args_->size; ++q)
        std::memcpy(out_ + (static_cast<size_t>(q) * args_->count + offset_) * elem_,
                    seg_->input(q, round), bytes);
      break;
    case CollOp::kReduceScatter: reduce_slots(out_ + at, static_cast<size_t>(me) * bytes, count_); break;
    default: break;  // barrier: everyone has arrived
  }
  finish_round();
}

void SegmentRun::collect() {
  const uint64_t round = first_round_ + index_;
  std::memcpy(out_ + offset_ * elem_, seg_->output(round), count_ * elem_);
  finish_round();
}

void SegmentRun::finish_round() {
  publish(seg_->own().done, CollectiveSegment::Waiters::kReuse);
  if (++index_ < rounds_) return begin_round();
  finished_ = true;
  phase_ = Phase::kFinished;
  // No fence: a publisher that reads the old round rings us for nothing, once.
  seg_->own().active_round.store(kNoRound, std::memory_order_release);
}

void SegmentRun::publish(std::atomic<uint64_t>& flag, CollectiveSegment::Waiters waiters) {
  const uint64_t round = first_round_ + index_;
  flag.store(round, std::memory_order_seq_cst);
  seg_->wake_sleepers(round, waiters);
}

void SegmentRun::fail(Error error) {
  if (!error_) error_ = std::make_shared<const Error>(std::move(error));
  seg_->own().active_round.store(kNoRound, std::memory_order_seq_cst);
}

std::string SegmentRun::waiting_round() const {
  std::ostringstream out;
  out << "round " << (index_ + 1) << " of " << rounds_ << " of " << sig_.describe()
      << " over the collective segment";
  return out.str();
}

std::string SegmentRun::waiting_for() const {
  if (blocked_on_ < 0) return "nothing (" + waiting_round() + ")";
  return "rank " + std::to_string(comm_rank(blocked_on_)) + " to " + blocked_what_ + " " + waiting_round();
}

}  // namespace plait::coll::segment
