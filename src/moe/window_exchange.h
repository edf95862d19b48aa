// The one-sided path: every rank writes its block for a peer straight into that peer's
// receive window, registered once and sized for the worst case, and the write's immediate
// carries the block's rows, so no count travels ahead of the data. A receiver knows a call
// is complete when every peer's immediate for it has arrived.
//
// Two windows alternate between calls. A peer can only be one call ahead of this rank (each
// call needs every rank's block), so when it writes call n + 2 into the window of call n, this
// rank has finished call n: its block for call n + 1 was written after that.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plait/bootstrap.h"
#include "plait/rdma.h"

namespace plait::moe {

enum class BlockKind : uint8_t { kDispatch = 0, kCombine = 1 };

class WindowExchange {
 public:
  // Collective over the bootstrap's ranks.
  WindowExchange(const Bootstrap& bootstrap, const std::string& name, size_t slot_bytes);
  ~WindowExchange();

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }
  std::chrono::milliseconds timeout() const;

  // Whether a block for `peer` may come in pieces, gathered by the transport as it writes
  // (shared memory with cross-memory attach); else it must be one piece, packed.
  bool gathers(int peer) const { return fabric_->gathers_writes(peer); }

  struct Block {
    std::vector<rdma::LocalPiece> pieces;  // in order; one unless gathers(peer)
    size_t bytes = 0;
    uint32_t rows = 0;
  };
  // Writes blocks[p] into every peer p's window (blocks[rank()] is ignored). `flag` travels
  // with the rows (a combine's "weights follow").
  void start(const std::vector<Block>& blocks, BlockKind kind, bool flag, const char* op);

  struct Arrived {
    const std::byte* data = nullptr;  // in this rank's window, valid until the next call
    uint32_t rows = 0;
    bool flag = false;
  };
  // Waits until every peer's block of the call started last has landed and this rank's own
  // writes are done; result[rank()] is empty. Throws naming the peers not heard from.
  std::vector<Arrived> finish(std::chrono::milliseconds timeout, const char* op);

 private:
  void fail_missing(const std::vector<bool>& heard, const char* op, bool timed_out,
                    const char* what, std::chrono::milliseconds timeout) const;

  int rank_ = 0;
  int size_ = 1;
  size_t slot_bytes_ = 0;
  std::unique_ptr<rdma::Fabric> fabric_;
  std::unique_ptr<rdma::CompletionQueue> sends_;
  std::unique_ptr<rdma::CompletionQueue> arrivals_;
  std::unique_ptr<rdma::MemoryRegion> window_;
  std::vector<rdma::RemoteKey> keys_;
  uint64_t calls_ = 0;           // calls started; the current one is calls_ - 1
  BlockKind kind_ = BlockKind::kDispatch;
  int writes_pending_ = 0;
  // Immediates of the next call that came while this rank still waited for the current one.
  std::array<std::vector<std::optional<rdma::Completion>>, 2> early_;
};

}  // namespace plait::moe
