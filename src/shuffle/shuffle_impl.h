// The Shuffle's state and protocol (include/plait/shuffle.h says what it does).
//
// Messages of round k (tags: k << 8 | kind):
//   kLocation  mapper -> reducer   where the reducer's block is: the map region's key, the
//                                  block's offset and length (40 bytes)
//   kTarget    reducer -> mapper   push only: the key of the reducer's receive region and the
//                                  offset the mapper's block goes to
//   kDone      pull: reducer -> mapper, "I have read your block" (the mapper may free it);
//              push: mapper -> reducer, "my block is written"
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plait/rdma.h"
#include "plait/shuffle.h"

namespace plait::shuffle {

struct BlockWire {  // a kLocation or kTarget message
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t key = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(BlockWire) == 40);

enum class MsgKind : uint64_t { kLocation = 1, kTarget = 2, kDone = 3 };

class Shuffle::Impl {
 public:
  Impl(rdma::Fabric& fabric, ShuffleOptions options);
  ~Impl();

  void map(const void* records, size_t count, const std::function<int(const uint8_t*)>& partition_of);
  Buffer exchange();
  const ShuffleStats& stats() const { return stats_; }

 private:
  // What a completion is about: kind in the top byte, peer and chunk below.
  enum class Op : uint64_t { kLocationIn = 1, kTargetIn, kDoneIn, kSend, kRead, kWrite };
  static uint64_t ctx(Op op, int peer, uint64_t chunk = 0) {
    return static_cast<uint64_t>(op) << 56 | static_cast<uint64_t>(peer) << 32 | chunk;
  }
  static Op ctx_op(uint64_t c) { return static_cast<Op>(c >> 56); }
  static int ctx_peer(uint64_t c) { return static_cast<int>((c >> 32) & 0xffffff); }

  uint64_t tag(MsgKind kind) const { return round_ << 8 | static_cast<uint64_t>(kind); }
  // Waits for one completion until the round's deadline; throws, naming `waiting_for`, on
  // a timeout or a failed operation.
  rdma::Completion next(const std::string& waiting_for);
  std::string block_text(int mapper, uint64_t bytes) const;
  std::string pending_text() const;

  Buffer run_round();  // exchange()'s body; exchange() cleans up after a failure
  void send_locations();
  void receive_pull(Buffer& out, const std::vector<uint64_t>& at);
  void push_round(Buffer& out, const std::vector<uint64_t>& at);
  void finish_round();

  rdma::Fabric& fabric_;
  ShuffleOptions options_;
  int rank_, size_;
  uint64_t round_ = 0;
  std::unique_ptr<rdma::CompletionQueue> cq_;
  std::chrono::steady_clock::time_point deadline_;

  // Map side of this round.
  bool mapped_ = false;
  std::unique_ptr<rdma::MemoryRegion> map_region_;  // partitions back to back
  std::vector<uint64_t> part_offset_, part_bytes_;  // per partition, in map_region_

  // Reduce side of this round.
  std::vector<BlockWire> from_;  // per mapper: where our block is (kLocation)
  std::vector<BlockWire> to_;    // per reducer (push): where our block goes (kTarget)
  ShuffleStats stats_;
};

}  // namespace plait::shuffle
