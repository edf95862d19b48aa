// A pending operation of the TCP provider and the table that finds it by id.
//
// An Op is shared by the caller's thread (which starts it), the progress thread (which
// moves its bytes and reads replies), and the frames and sinks that reference its memory.
// It completes exactly once: whoever flips `finished` first pushes the completion (success,
// error, cancel or peer failure); every later writer sees `finished` and leaves the user's
// memory alone (see TcpFabric::user_memory_guard_).
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

namespace plait::transport::tcp {

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
  uint64_t header = 0;  // send: the header word to deliver

  // recv, once matched: the message's length and header word.
  std::atomic<uint64_t> message_length{0};
  std::atomic<uint64_t> message_header{0};
  // recv (rendezvous): payload bytes landed so far. Progress thread only.
  uint64_t received = 0;
  // Frames sent (send) or replies received (write/read) still outstanding.
  std::atomic<size_t> parts_left{0};
  // write/read: the first piece that failed. Progress thread only.
  std::shared_ptr<const Error> first_error;

};

using OpRef = std::shared_ptr<Op>;

// Every op that has started and not completed, by id: incoming replies and data find their
// op here, and cancel() and peer failures sweep it.
class OpTable {
 public:
  void add(const OpRef& op) {
    std::lock_guard lock(mu_);
    ops_.emplace(op->id, op);
    // Copies of sibling receives that lost to another provider finish without a report, so
    // nothing erases them; sweep finished entries now and then (erasing an op that is being
    // reported right now is harmless: report() erases it too).
    if (++adds_ % 1024 == 0) std::erase_if(ops_, [](const auto& kv) { return kv.second->done(); });
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

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, OpRef> ops_;
  uint64_t adds_ = 0;
};

}  // namespace plait::transport::tcp
