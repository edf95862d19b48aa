// What every provider keeps about the work it has in flight, written once above the
// providers: the pending operation (Op) and the table that finds it by id, a peer's failure
// state, the fields of a message nobody waited for yet, and the Completion and truncation
// error built from an op.
//
// An Op is shared by the caller's thread (which starts it), the provider's progress (which
// moves its bytes and reads replies) and whatever references its memory (frames, outboxes).
// It completes exactly once (CompletionClaim): whoever flips `finished` first pushes the
// completion, and every later writer sees `finished` and leaves the user's memory alone
// (see OpLifecycle's user-memory guard).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <unordered_set>
#include <memory_resource>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/futex_mutex.h"
#include "plait/error.h"
#include "transport/completion_claim.h"
#include "transport/completion_queue.h"
#include "transport/fabric.h"
#include "transport/free_list_resource.h"

namespace plait::transport {

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
  // recv delivered in pieces: payload bytes landed so far. The provider's progress only.
  uint64_t received = 0;
  // Pieces or replies still outstanding (frames of a send, acknowledgements of a write...).
  std::atomic<size_t> parts_left{0};
  // The first piece that failed; set before parts_left drops.
  std::shared_ptr<const Error> first_error;
  // tcp rendezvous: the other side's op (a recv: the sender's; a send, once cleared to send:
  // the receiver's); 0 before. The provider's progress only.
  uint64_t remote_op = 0;
  // tcp rendezvous recv: offsets of the stripes in, so that a stripe sent again after a
  // stream broke counts once. The provider's progress only.
  std::unique_ptr<std::unordered_set<uint64_t>> stripes_in;
  // A gathered write that had to go through the target's ring: its pieces, packed, which
  // `local` points into.
  std::unique_ptr<char[]> owned_source;

  // In the OpTable. seq_cst with `finished`: of whoever completes the op and whoever adds it
  // to the table, one sees the other and erases it.
  std::atomic<bool> in_table{false};
};

using OpRef = std::shared_ptr<Op>;

// Ops that wait on a peer, by id: replies and data find their op here, and cancel() and peer
// failures sweep it. (A provider may keep posted receives in its matcher instead.)
class OpTable {
 public:
  void add(const OpRef& op) {
    op->in_table.store(true, std::memory_order_seq_cst);
    {
      std::lock_guard lock(mu_);
      ops_.emplace(op->id, op);
      // Copies of sibling receives that lost to another provider finish without a report,
      // so nothing erases them: sweep finished entries now and then.
      if (++adds_ % 1024 == 0) std::erase_if(ops_, [](const auto& kv) { return kv.second->done(); });
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
  void erase(uint64_t id) {
    std::lock_guard lock(mu_);
    ops_.erase(id);
  }

  // Room for a node of the map (link, key, OpRef, cached hash).
  static constexpr size_t kNodeBytes = 64;
  mutable FutexMutex mu_;
  // Before the map: its nodes come from this pool, guarded by mu_ like the map, so that
  // adding and erasing an op does not call the global allocator once the pool is warm.
  FreeListResource pool_{kNodeBytes};
  std::pmr::unordered_map<uint64_t, OpRef> ops_{&pool_};
  uint64_t adds_ = 0;  // guarded by mu_
};

// A peer as every provider tracks its health: once failed, it stays failed, and ops started
// later fail with the same reason.
struct PeerHealth {
  std::atomic<bool> failed{false};
  mutable FutexMutex mu;
  std::string failure;  // guarded by mu

  // Records the failure; false if the peer had already failed (the first reason stays).
  bool mark_failed(const std::string& why) {
    std::lock_guard lock(mu);
    if (failed.load()) return false;
    failure = why;
    failed.store(true);
    return true;
  }
  std::string reason() const {
    std::lock_guard lock(mu);
    return failure;
  }
};

// The payload of an eager message kept until its receive is posted: a small one (the
// latency-bound case) inline in the entry, without an allocation of its own; a larger one on
// the heap.
class BufferedPayload {
 public:
  // Room for `n` bytes; what was there before is not kept.
  void resize(size_t n) {
    if (n > kInline) heap_.resize(n);
    size_ = n;
  }
  void assign(const char* first, const char* last) {
    resize(static_cast<size_t>(last - first));
    if (size_ > 0) std::memcpy(data(), first, size_);
  }
  char* data() { return size_ > kInline ? heap_.data() : inline_; }
  const char* data() const { return size_ > kInline ? heap_.data() : inline_; }
  size_t size() const { return size_; }

 private:
  static constexpr size_t kInline = 64;
  char inline_[kInline];
  std::vector<char> heap_;
  size_t size_ = 0;
};

// A message that arrived before its receive (TagMatcher's entry), as both providers see it.
struct UnexpectedMessage {
  int source = -1;
  uint64_t tag = 0;
  uint64_t header = 0;
  uint64_t length = 0;
  bool rendezvous = false;
  bool complete = false;     // eager: the payload is all there (guarded by the matcher's lock)
  OpRef claimed_by;          // a recv matched it before its payload was complete
  uint64_t sender_op = 0;    // rendezvous: the sender's op, named in the answer
  BufferedPayload data;      // eager: the payload
};

inline Completion completion_of(const Op& op) {
  Completion c;
  c.context = op.context;
  c.op = op.type;
  c.peer = op.peer.load(std::memory_order_relaxed);
  c.tag = op.tag;
  switch (op.type) {
    case OpType::kRecv:
      c.bytes = op.message_length.load(std::memory_order_relaxed);
      c.header = op.message_header.load(std::memory_order_relaxed);
      break;
    case OpType::kFetchAdd:
    case OpType::kCompareSwap:
      c.bytes = sizeof(uint64_t);
      break;
    default:
      c.bytes = op.length;
  }
  return c;
}

// The error of a message of `length` bytes matched to a receive whose buffer is smaller.
inline Error truncation_error(const Op& recv, uint64_t length, ErrorContext context) {
  return invalid_usage("message of " + std::to_string(length) + " bytes from rank " +
                           std::to_string(recv.peer.load()) + " (tag " +
                           std::to_string(recv.tag) + ") does not fit the receive buffer of " +
                           std::to_string(recv.length) + " bytes",
                       std::move(context));
}

}  // namespace plait::transport
