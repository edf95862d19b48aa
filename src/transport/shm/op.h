// A pending operation of the shm provider, and the table that finds it by id.
//
// Most operations never become an Op: an eager send that fits the ring, or a small one-sided
// write or read by cross-memory attach, completes inside the call. An Op exists for what
// waits on a peer (a posted receive, a rendezvous, a reply) and is shared by the caller's
// thread, the drainer (progress thread or inline poller) and the outbox. It completes
// exactly once: whoever flips `finished` first pushes the completion; every later writer
// sees `finished` and leaves the user's memory alone (see ShmFabric::user_memory_guard_).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "transport/completion_claim.h"
#include "transport/completion_queue.h"
#include "transport/fabric.h"

namespace plait::transport::shm {

// Completion (exactly once, sibling receives): CompletionClaim.
struct Op : CompletionClaim {
  uint64_t id = 0;
  OpType type = OpType::kSend;
  PolicyCompletionQueue* cq = nullptr;
  uint64_t context = 0;
  // kRecv with kAnySource: -1 until matched, then the source.
  std::atomic<int> peer{-1};
  // send/write: source; recv/read: destination; atomics: where the old value goes.
  char* local = nullptr;
  // send/write/read: bytes; recv: the buffer's capacity.
  size_t length = 0;
  uint64_t tag = 0;
  uint64_t header = 0;

  // recv, once matched: the message's length and header word.
  std::atomic<uint64_t> message_length{0};
  std::atomic<uint64_t> message_header{0};
  // recv (copy fallback): payload bytes landed so far. Drainer only.
  uint64_t received = 0;
  // Pieces whose reply is outstanding (fallback write/read).
  std::atomic<size_t> parts_left{0};
  // The first piece that failed; set before parts_left drops.
  std::shared_ptr<const Error> first_error;

  // In the OpTable (most receives never are). seq_cst with `finished`: whoever completes the
  // op and whoever adds it to the table, one of them sees the other and erases it.
  std::atomic<bool> in_table{false};
};

using OpRef = std::shared_ptr<Op>;

// Every op that waits on a peer (except posted receives, which the matcher holds), by id:
// replies find their op here, and cancel() and peer failures sweep it.
class OpTable {
 public:
  void add(const OpRef& op) {
    op->in_table.store(true, std::memory_order_seq_cst);
    {
      std::lock_guard lock(mu_);
      ops_.emplace(op->id, op);
    }
    if (op->finished.load(std::memory_order_seq_cst)) erase(op->id);
  }
  // After the op finished (claim()).
  void remove(const Op& op) {
    if (op.in_table.load(std::memory_order_seq_cst)) erase(op.id);
  }
  OpRef find(uint64_t id) const {
    std::lock_guard lock(mu_);
    auto it = ops_.find(id);
    return it == ops_.end() ? nullptr : it->second;
  }
  void erase(uint64_t id) {
    std::lock_guard lock(mu_);
    ops_.erase(id);
  }
  std::vector<OpRef> select(const std::function<bool(const Op&)>& pred) const {
    std::lock_guard lock(mu_);
    std::vector<OpRef> out;
    for (const auto& [id, op] : ops_)
      if (pred(*op)) out.push_back(op);
    return out;
  }
  bool empty() const {
    std::lock_guard lock(mu_);
    return ops_.empty();
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, OpRef> ops_;
};

}  // namespace plait::transport::shm
