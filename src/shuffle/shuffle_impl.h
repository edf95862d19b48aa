// The Shuffle's state and protocol (include/plait/shuffle.h says what it does).
//
// A mapper's output in a round is a list of runs (one per map() call), each partitioned
// (and sorted by key within each partition when key_bytes is set), held in a registered
// region or, past the memory budget, spilled to the mapper's spill file. A reducer's block
// from a mapper is the list of that mapper's non-empty partition segments, one per run.
//
// Messages of round k (tags: k << 40 | id << 8 | kind):
//   kLocation  mapper -> reducer   its blocks: a header entry (offset = block count, bytes =
//                                  their total), then one BlockWire per block
//   kTarget    reducer -> mapper   push only: the key of the reducer's receive region and the
//                                  offset the mapper's blocks go to
//   kDone      pull: reducer -> mapper, "I have read your blocks" (the mapper may free them);
//              push: mapper -> reducer, "my blocks are written"
//   kRequest   reducer -> mapper   pull, spilled block: read bytes at offset of your spill
//                                  file and send them to me tagged with id
//   kData      mapper -> reducer   the bytes of a request (none: the request was out of range)
//   kCredit    reducer -> mapper   push with a key: write bytes of one of your blocks for me
//                                  into this window of mine (a CreditWire)
//   kWritten   mapper -> reducer   push with a key, tagged with the credit's id, no bytes: the
//                                  window is written
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "plait/rdma.h"
#include "plait/shuffle.h"
#include "shuffle/spill_file.h"
#include "shuffle/wire.h"

namespace plait::shuffle {

class Shuffle::Impl {
 public:
  Impl(rdma::Fabric& fabric, ShuffleOptions options);
  ~Impl();

  using PartitionOf = std::function<int(const uint8_t*)>;
  void map(const void* records, size_t count, const PartitionOf& partition_of);
  void map(Buffer records, const PartitionOf& partition_of);
  Buffer exchange();
  void exchange(const Sink& sink);
  const ShuffleStats& stats() const { return stats_; }

 private:
  // What a completion is about: kind in the top byte, peer and an id below.
  enum class Op : uint64_t {
    kLocationIn = 1, kTargetIn, kDoneIn, kSend, kRead, kWrite, kData, kRequestIn, kServed,
    kCreditIn, kPushed, kNotified, kWritten,
    kAsked  // a read request or a credit this reducer sent
  };
  static uint64_t ctx(Op op, int peer, uint64_t id = 0) {
    return static_cast<uint64_t>(op) << 56 | static_cast<uint64_t>(peer) << 32 | id;
  }
  static Op ctx_op(uint64_t c) { return static_cast<Op>(c >> 56); }
  static int ctx_peer(uint64_t c) { return static_cast<int>((c >> 32) & 0xffffff); }
  static uint64_t ctx_id(uint64_t c) { return c & 0xffffffff; }

  uint64_t tag(MsgKind kind, uint64_t id = 0) const {
    return round_ << 40 | id << 8 | static_cast<uint64_t>(kind);
  }

  struct Run {  // one map() call's output
    Buffer owned;  // the caller's records, when they were partitioned in place
    std::unique_ptr<rdma::MemoryRegion> region;  // null once spilled (or empty)
    uint64_t file_offset = 0;                     // in spill_, once spilled
    bool spilled = false;
    std::vector<uint64_t> offset, bytes;  // per partition, within the run
    uint64_t total = 0;
  };

  // A piece of a block being fetched: where it lands and how its completion is known.
  struct Fetch {
    int mapper;
    const BlockWire* block;
    uint64_t offset;  // in the block
    uint64_t bytes;
    uint8_t* dest;
    uint64_t id;
  };

  // Fails every operation of the round still pending and drops their completions; on return
  // nothing more lands in our buffers.
  void cancel_pending();
  // Declared after the buffers a round's operations land in (locals are destroyed in reverse
  // order): on an exception, the operations are cancelled before those buffers go.
  class CancelOnThrow {
   public:
    explicit CancelOnThrow(Impl& impl) : impl_(impl), uncaught_(std::uncaught_exceptions()) {}
    ~CancelOnThrow() {
      if (std::uncaught_exceptions() > uncaught_) impl_.cancel_pending();
    }
    CancelOnThrow(const CancelOnThrow&) = delete;
    CancelOnThrow& operator=(const CancelOnThrow&) = delete;

   private:
    Impl& impl_;
    int uncaught_;
  };

  // Waits for one completion until the round's deadline, serving spill reads for other
  // ranks on the way; throws, naming `waiting_for`, on a timeout or a failed operation.
  rdma::Completion next(const std::string& waiting_for);
  rdma::Completion wait_one(const std::string& waiting_for);
  [[noreturn]] void fail(const rdma::Completion& c);
  std::string block_text(int mapper, uint64_t bytes) const;

  // Map side (shuffle_map.cc).
  std::vector<uint32_t> partitions_of(const uint8_t* in, size_t count,
                                      const PartitionOf& partition_of) const;
  void keep_run(Run run, size_t count);
  void lay_out(const std::vector<uint32_t>& part, Run& run) const;
  void permute_in_place(uint8_t* base, std::vector<uint32_t>& part,
                        const std::vector<uint64_t>& offset) const;
  void write_run(const uint8_t* in, size_t count, const std::vector<uint32_t>& part, Run& run);
  void spill_over_budget();
  const uint8_t* run_data(const Run& run) const;

  // Rounds (shuffle.cc).
  template <typename Body>
  auto guarded(Body body) -> decltype(body());
  void begin_round();
  void end_round();
  void send_locations();
  void finish_round();
  uint64_t partition_bytes() const;

  // Push with a key: the reducer gives credits for its merge's windows (push with a key)
  // instead of reading them.
  bool credited() const { return options_.mode == ShuffleMode::kPush && options_.key_bytes > 0; }

  // Fetching and serving (shuffle_fetch.cc).
  void post_serving();
  bool serve(const rdma::Completion& c);  // true: c was about serving
  bool start_fetch(const Fetch& f);  // true: done already (our own block)
  void pump_requests(int mapper);    // read requests, or credits
  void fetched(const rdma::Completion& c, uint64_t expected_bytes);
  void receive_pull(Buffer& out);
  void merge_fetched(const Sink& sink);  // the runs merged, a window at a time, pulled or pushed

  // Push (shuffle_push.cc).
  void push_round(Buffer& out, const std::vector<uint64_t>& at);
  void ask_credit(const Fetch& f);       // reducer: a credit for window f
  bool serve_credit(const rdma::Completion& c);  // mapper: true when c was about credits
  void pump_pushes();

  rdma::Fabric& fabric_;
  ShuffleOptions options_;
  int rank_, size_;
  uint64_t round_ = 0;
  std::unique_ptr<rdma::CompletionQueue> cq_;
  std::chrono::steady_clock::time_point deadline_;

  // Map side of this round.
  std::vector<Run> runs_;
  uint64_t held_bytes_ = 0;  // of runs in memory
  std::unique_ptr<SpillFile> spill_;
  std::vector<uint64_t> part_bytes_;  // per partition, over all runs

  // Serving spill reads: a receive posted per peer and slot, a few staging buffers.
  static constexpr int kRequestSlots = 4;
  static constexpr int kServeBuffers = 4;
  std::vector<RequestWire> request_in_;  // [peer * kRequestSlots + slot]
  struct Served {
    int peer;
    RequestWire request;
  };
  std::deque<Served> serve_queue_;
  std::vector<Buffer> serve_buffer_;
  std::vector<int> serve_free_;
  int serving_ = 0;  // data sends, pushes and their notices not yet completed
  // Read requests and credits sent whose sends have not completed: the round waits for them,
  // so that no completion of one is taken for a later phase's message.
  int asks_out_ = 0;

  // Serving credits (push with a key): a receive posted per peer and slot; the credits
  // waiting for a write, and those being written (the write's context indexes pushing_).
  std::vector<CreditWire> credit_in_;  // [peer * kRequestSlots + slot]
  struct Push {
    int reducer;
    CreditWire credit;
    int buffer;  // staging buffer of a spilled block's bytes, or -1
  };
  std::deque<Push> push_queue_;
  std::vector<Push> pushing_;
  std::vector<uint32_t> pushing_free_;

  // Reduce side of this round.
  std::vector<std::vector<BlockWire>> from_;  // per mapper: its blocks for us
  std::vector<uint64_t> from_bytes_;           // per mapper: their total
  std::vector<std::vector<BlockWire>> own_;    // our blocks, per partition (ours included)
  std::vector<std::vector<const uint8_t*>> own_src_;  // where they are (null: spilled), as own_
  std::vector<const uint8_t*> own_data_;       // our blocks of our partition (null: spilled)
  std::vector<std::deque<Fetch>> request_queue_;  // per mapper: spill reads not yet asked
  std::vector<int> requests_out_;                  // per mapper: asked, not yet answered
  std::vector<RequestWire> request_out_;           // by fetch id: the messages in flight
  std::vector<CreditWire> credit_out_;             // by fetch id: the credits in flight
  Buffer windows_;  // the merge's windows, every stream's two
  std::unique_ptr<rdma::MemoryRegion> windows_region_;  // push: them, registered for writes
  const uint8_t* windows_base_ = nullptr;
  uint64_t written_sink_ = 0;  // where the kWritten notices (no bytes) are received
  int fetches_ = 0;                                // reads and requests not yet completed
  std::vector<BlockWire> to_;  // per reducer (push): where our blocks go (kTarget)
  ShuffleStats stats_;
};

}  // namespace plait::shuffle
