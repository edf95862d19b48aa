// ScheduleBuilder, which infers a schedule's dependencies from data hazards, and the chunked
// transfers built on it.
//
// Builders write a schedule as if it ran one step at a time in emission order (a plain
// sequential program). ScheduleBuilder records, per element range of every buffer, the last
// step that wrote it and the steps that read it since, and gives each new step exactly the
// dependencies its accesses need: read-after-write, write-after-read, write-after-write. The
// executor may then run steps in any order those dependencies allow and still compute what
// the sequential program computes; nothing else is ordered, which is where the parallelism
// and the chunk pipelining come from. Orderings that are not data hazards (a barrier's
// zero-byte messages, pairwise exchange's one-peer-at-a-time) are passed explicitly.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "coll/schedule/layout.h"
#include "coll/schedule/schedule.h"

namespace plait::coll {

// For each element range of each physical buffer: the last writer and the readers since.
class HazardTracker {
 public:
  enum class Access : uint8_t { kRead, kWrite, kReadWrite };
  struct Use {
    Region region;
    Access access;
  };
  // The steps `uses` must wait for; then records `step` as their newest reader/writer.
  void record(StepId step, std::span<const Use> uses, std::vector<StepId>* deps);

 private:
  struct Segment {
    std::optional<StepId> writer;
    std::vector<StepId> readers;
  };
  using Map = std::map<size_t, Segment>;  // segment start -> state until the next start
  Map::iterator split(Map& map, size_t at);
  Map maps_[3];
};

// Schedules written as sequential programs; see the top of this file.
class ScheduleBuilder {
 public:
  ScheduleBuilder(const CollArgs& args, std::string algorithm);

  const CollArgs& args() const { return args_; }
  const BufferLayout& layout() const { return layout_; }
  int rank() const { return args_.rank; }
  int size() const { return args_.size; }
  size_t chunk() const { return args_.chunk_count; }
  Region where(Slice s) const { return resolve(layout_, s); }

  Slice scratch(size_t count) {
    return Slice{BufferId::kScratch, sched_.alloc_scratch(count), count};
  }

  StepId send(int peer, Slice src, std::span<const StepId> after = {});
  StepId recv(int peer, Slice dst, std::span<const StepId> after = {});
  StepId recv_reduce(int peer, Slice staging, Slice accum, std::span<const StepId> after = {});
  StepId reduce(Slice src, Slice dst, std::span<const StepId> after = {});
  // Nothing when src and dst are the same elements; through scratch when they partly overlap.
  void copy(Slice src, Slice dst);

  // Transfers cut into chunks of at most `chunk` elements (0: one piece); empty slices emit
  // nothing, which both sides agree on because they compute the same counts. Each returns
  // the ids of the steps it added.
  std::vector<StepId> send_chunks(int peer, Slice src, size_t chunk);
  std::vector<StepId> recv_chunks(int peer, Slice dst, size_t chunk);
  // Per chunk: recv into dst, then dst = dst (op) own. For out-of-place first contributions:
  // no staging, no copy.
  void recv_then_reduce_chunks(int peer, Slice dst, Slice own, size_t chunk);
  // A tree node's traffic with its parent: `up` goes up and `down` comes back, chunk by
  // chunk, with at most `window` chunks sent up that have not come back down. Without the
  // bound a subtree sends everything at once and takes more than its share of the parent's
  // link from a sibling subtree that is still reducing; the parent then waits on the
  // sibling at the end (docs/measurements.md, "tree window"). A chunk comes back no sooner
  // than it went up, so window >= 1 cannot deadlock.
  void send_up_recv_down_chunks(int parent, Slice up, Slice down, size_t chunk, size_t window);

  // The id of the step emitted last (steps must exist).
  StepId last_step() const { return static_cast<StepId>(sched_.steps.size() - 1); }
  // A pairwise handshake for exchanges in rounds: sends `peer` a zero-byte token once
  // `finished` is done and returns the receive of `peer`'s token, for this round's sends to
  // wait on. Both partners call it in the same round. Without it a rank a round ahead sends
  // its next message into a link still busy with its partner's current round, the two
  // rounds share the link, and the skew feeds itself (docs/measurements.md, "round
  // handshake").
  StepId handshake(int peer, StepId finished);
  // The smallest round that gets one: below it a round's transfer is within a few message
  // latencies even on a 10 Gbit/s link, and the token would cost more than it saves.
  static constexpr size_t kHandshakeBytes = size_t{256} << 10;
  // TCP's eager threshold (tcp_fabric.cc), written again because a schedule does not know
  // its provider. From it a send is a rendezvous, whose data goes only once the receiver is
  // ready, so an acknowledgement would only add a trip through a busy queue.
  static constexpr size_t kRendezvousBytes = size_t{2} << 20;
  // Whether one message of `count` elements is acknowledged where a schedule wants its
  // sends to leave one after another: an eager send completes once the transport has its
  // bytes, not when they arrive, so a sender's next message would share its link with this
  // one. From kHandshakeBytes (below it the token costs more than the overlap) to
  // kRendezvousBytes.
  bool acknowledged(size_t count) const {
    const size_t bytes = count * dtype_size(args_.dtype);
    return bytes >= kHandshakeBytes && bytes < kRendezvousBytes;
  }

  Schedule finish() &&;

 private:
  StepId add(StepKind kind, int peer, Slice src, Slice dst, std::span<const StepId> after);

  CollArgs args_;
  BufferLayout layout_;
  Schedule sched_;
  HazardTracker tracker_;
  std::vector<StepId> deps_;  // reused per step
};

// Staging slots in scratch, handed out round robin: a slot is reused only after the step
// that used it last, and the tracker orders that reuse. Two slots let the receive of chunk
// i+1 land while chunk i is still being reduced. Scratch is reserved on the first take().
class StagingRing {
 public:
  StagingRing(ScheduleBuilder& b, size_t slot_elems, size_t slots = 2);
  Slice take(size_t count);

 private:
  ScheduleBuilder* builder_;
  std::optional<Slice> base_;
  size_t slot_elems_;
  size_t slots_;
  size_t next_ = 0;
};

// Per chunk: recv into a staging slot, then accum (op)= slot; as two steps, so the receive
// does not wait for earlier reductions into accum (only for its slot to be free).
void recv_staged_reduce_chunks(ScheduleBuilder& b, int peer, Slice accum, StagingRing& ring,
                               size_t chunk);
// Receives `peer`'s whole vector and combines it with this rank's into acc: straight from
// `own` (acc = own (op) received) while acc does not hold our data yet, else through
// staging. Returns true: afterwards acc holds the combination.
bool recv_combine_chunks(ScheduleBuilder& b, int peer, Slice own, Slice acc, bool acc_holds_own,
                         StagingRing& ring, size_t chunk);
// Per chunk: one fused recv_reduce through a staging slot.
void recv_reduce_chunks(ScheduleBuilder& b, int peer, Slice accum, StagingRing& ring,
                        size_t chunk);

}  // namespace plait::coll
