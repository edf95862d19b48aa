// The life of a provider's pending operation, from the call's argument checks to its one
// completion, written once for every provider (a base class of ShmFabric and TcpFabric, and
// of any provider after them): ids and pooled allocation, admission against peer failure,
// success, failure and cancellation with the guards that make "cancel() returned" mean that
// nothing more lands in the queue or in the user's memory, and the ops a failed peer takes
// down with it.
//
// A provider supplies what only it knows: which ranks it serves and their health
// (health_of()).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <memory_resource>
#include <shared_mutex>
#include <string>
#include <vector>

#include "core/futex_shared_mutex.h"
#include "transport/completion_queue.h"
#include "transport/fabric.h"
#include "transport/free_list_resource.h"
#include "transport/pending_op.h"

namespace plait::transport {

class OpLifecycle {
 protected:
  // `provider` ("shm", "tcp") and the fabric's `name` appear in messages.
  OpLifecycle(int rank, int size, std::string provider, std::string name);
  virtual ~OpLifecycle() = default;

  // The health of the peer `rank`, or null if this provider does not serve it.
  virtual PeerHealth* health_of(int rank) const = 0;

  // --- checks at the call (they throw Error(kInvalidUsage)) ---
  PolicyCompletionQueue* checked_cq(CompletionQueue* cq, const char* what) const;
  // `peer` is a rank this provider serves (not us, not another provider's).
  void check_peer(int peer, const char* what) const;
  ErrorContext call_context(int peer, const char* op, size_t bytes) const;

  // --- ops ---
  OpRef new_op(OpType type, int peer, PolicyCompletionQueue* cq, uint64_t context);
  // A one-sided call's checks and its op, admitted: `local` is the buffer of `len` bytes
  // (atomics: the 8-byte result). Throws kInvalidUsage for a bad peer or queue or a null
  // buffer; returns null when the op already failed because its peer is gone.
  OpRef start_one_sided(OpType type, int peer, CompletionQueue* cq, uint64_t context, void* local,
                        size_t len);
  // A receive call's checks and its op, in the op table (not yet matched): `peer` may be
  // kAnySource; `sibling` is set for a copy posted on several providers.
  OpRef start_recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                   uint64_t context, std::shared_ptr<std::atomic<bool>> sibling);
  // The same, not in the op table: for a provider whose matcher keeps its posted receives
  // (and that puts a receive in the table once it is matched and still in flight).
  OpRef new_recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                 uint64_t context, std::shared_ptr<std::atomic<bool>> sibling);
  // Puts the op in the table; false if it already failed because its peer is gone. After
  // add(): either the failed peer's sweep sees this op, or we see the flag it set first.
  bool admit(const OpRef& op);
  void succeed(Op& op);
  void fail(Op& op, const Error& error);
  void fail_remote(Op& op, const std::string& why);
  // Pushes the completion of an op the caller has claimed (Op::claim), under reporting().
  void report(Op& op, std::shared_ptr<const Error> error);
  // Completes an operation that never needed an Op (it finished inside the call).
  void complete_now(PolicyCompletionQueue* q, OpType type, int peer, size_t bytes, uint64_t tag,
                    uint64_t context, std::shared_ptr<const Error> error = nullptr);
  ErrorContext context_of(const Op& op) const;

  // --- two-sided ---
  // Fails the receive if the message is longer than its buffer.
  bool truncated(Op& recv, uint64_t length);
  // A receive matched a complete buffered eager message: copy it in and complete.
  void deliver_buffered(Op& recv, const UnexpectedMessage& message);
  // A posted receive that found nothing buffered: fails it when no message can come any more
  // (its peer has failed; for any source, every peer has, unless a sibling copy on another
  // provider may still match).
  void fail_if_no_sender(Op& recv, int peer);
  // Posts a receive's op (new_recv or start_recv) to the provider's `matcher`. A buffered
  // message it matches is delivered (an eager one whose payload is all there; one still
  // arriving is the reader's to deliver) or, sent by rendezvous, handed to
  // `rendezvous(op, message)`, the provider's own protocol. A sibling copy that matched on
  // another provider first ends it here (off the op table, if it was in it). With nothing
  // buffered, it fails when no sender is left (checked after posting: a failure from then on
  // finds it posted).
  template <typename Matcher, typename Rendezvous>
  void match_recv(const OpRef& op, int peer, Matcher& matcher, Rendezvous&& rendezvous) {
    typename Matcher::Posted posted = matcher.post(op);
    if (!posted.match) {
      if (op->done()) {
        ops_.remove(*op);
        return;
      }
      fail_if_no_sender(*op, peer);
      return;
    }
    if (posted.match->rendezvous) rendezvous(op, *posted.match);
    else if (posted.complete) deliver_buffered(*op, *posted.match);
  }

  // --- one-sided: immediates ---
  // set_imm_cq(): where peers' writes with an immediate complete (null: they are dropped).
  void set_imm_queue(CompletionQueue* cq) { imm_cq_.store(cq ? checked_cq(cq, "set_imm_cq") : nullptr); }
  // A peer's write with an immediate landed in region `key`, `bytes` at `offset`.
  void deliver_imm(int peer, uint64_t key, uint64_t offset, uint64_t bytes, uint32_t imm);

  // --- failures and cancellation ---
  // Marks the peer failed and logs why (orderly: it said goodbye); false if it already was.
  bool mark_failed(int peer, const std::string& why, bool orderly);
  // What this fabric's goodbyes carry: why it lost its first peer that did not leave in
  // order, or nothing. A rank that gives up an operation because a peer died shuts its fabric
  // down; the peers still waiting on it then learn which rank started it (shut_down_reason).
  std::string first_loss() const;
  // The failure of a peer that said goodbye, with what its goodbye carried (first_loss()).
  static std::string shut_down_reason(int peer, const std::string& its_first_loss);
  // Which ops fail with peer `peer`, just marked failed: its own, and receives from any
  // source unless it left in order while others may still send. Then fail_all().
  std::function<bool(const Op&)> fails_with(int peer, bool orderly) const;
  void fail_all(const std::vector<OpRef>& ops, const std::string& why);
  // The ops of the table that complete into `cq` (cancel()).
  std::vector<OpRef> ops_of(const CompletionQueue* cq) const;
  // cancel(), after failing its ops: returns once every report racing with it has landed,
  // and every provider access to user memory that began before them has ended.
  void await_reports();
  void await_user_memory_access();
  // From now on completions are dropped (the fabric is going away).
  void stop_reporting() { stopping_.store(true); }
  bool reporting_stopped() const { return stopping_.load(std::memory_order_relaxed); }

  // First: ops come from this pool and must all be gone before it is (no allocation per
  // operation once it is warm). A block holds an op and its shared_ptr control block.
  static constexpr size_t kOpBlockBytes = 320;
  SynchronizedFreeListResource op_pool_{kOpBlockBytes};

  const int rank_;
  const int size_;
  const std::string provider_;
  const std::string name_;
  OpTable ops_;
  std::atomic<uint64_t> next_id_{1};
  // Shared around every provider access to a pending op's memory; cancel() takes it
  // exclusively once, after marking ops finished, to wait out the accesses in flight.
  FutexSharedMutex user_memory_guard_;
  // Shared around claim-and-push; cancel() takes it exclusively after claiming what it
  // found, so once cancel() returns no completion is still on its way into the queue (whose
  // owner may destroy it right away).
  FutexSharedMutex report_guard_;
  std::atomic<PolicyCompletionQueue*> imm_cq_{nullptr};

 private:
  bool any_peer_alive() const;

  std::atomic<bool> stopping_{false};
  mutable FutexMutex first_loss_mu_;
  std::string first_loss_;  // guarded by first_loss_mu_
};

}  // namespace plait::transport
