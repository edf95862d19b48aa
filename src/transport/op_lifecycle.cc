#include "transport/op_lifecycle.h"

#include <cstring>
#include <mutex>

#include "core/log.h"

namespace plait::transport {

OpLifecycle::OpLifecycle(int rank, int size, std::string provider, std::string name)
    : rank_(rank), size_(size), provider_(std::move(provider)), name_(std::move(name)) {}

PolicyCompletionQueue* OpLifecycle::checked_cq(CompletionQueue* cq, const char* what) const {
  if (!cq) throw invalid_usage(std::string(what) + ": null completion queue", {.rank = rank_});
  PolicyCompletionQueue* q = cq->policy_queue();
  if (!q)
    throw invalid_usage(std::string(what) + ": completion queue was not created by a fabric",
                        {.rank = rank_});
  return q;
}

void OpLifecycle::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_)
    throw invalid_usage("peer " + std::to_string(peer) + " is not a rank of this fabric (size " +
                            std::to_string(size_) + ")",
                        {.rank = rank_, .op = what});
  if (peer == rank_)
    throw invalid_usage("the " + provider_ + " provider does not connect a rank to itself; copy locally",
                        {.rank = rank_, .peer = peer, .op = what});
  if (!health_of(peer))
    throw invalid_usage("rank " + std::to_string(peer) + " is not served by this " + provider_ +
                            " provider (another provider reaches it)",
                        {.rank = rank_, .peer = peer, .op = what});
}

ErrorContext OpLifecycle::call_context(int peer, const char* op, size_t bytes) const {
  return {.rank = rank_, .peer = peer, .op = op, .bytes = static_cast<int64_t>(bytes)};
}

OpRef OpLifecycle::new_op(OpType type, int peer, PolicyCompletionQueue* cq, uint64_t context) {
  // An op that outgrew its block would still work, from the global allocator, per operation.
  static_assert(sizeof(Op) + 64 <= kOpBlockBytes, "Op no longer fits its pool block");
  OpRef op = std::allocate_shared<Op>(std::pmr::polymorphic_allocator<Op>(&op_pool_));
  op->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  op->type = type;
  op->cq = cq;
  op->context = context;
  op->peer.store(peer, std::memory_order_relaxed);
  return op;
}

OpRef OpLifecycle::start_one_sided(OpType type, int peer, CompletionQueue* cq, uint64_t context,
                                   void* local, size_t len) {
  const char* what = to_string(type).data();  // the names are literals
  check_peer(peer, what);
  PolicyCompletionQueue* q = checked_cq(cq, what);
  const bool atomic = type == OpType::kFetchAdd || type == OpType::kCompareSwap;
  if (!local && (len > 0 || atomic))
    throw invalid_usage(atomic ? "null result pointer" : "null buffer",
                        call_context(peer, what, len));
  OpRef op = new_op(type, peer, q, context);
  op->local = static_cast<char*>(local);
  op->length = len;
  return admit(op) ? op : nullptr;
}

OpRef OpLifecycle::start_recv(int peer, void* buf, size_t capacity, uint64_t tag,
                              CompletionQueue* cq, uint64_t context,
                              std::shared_ptr<std::atomic<bool>> sibling) {
  OpRef op = new_recv(peer, buf, capacity, tag, cq, context, std::move(sibling));
  ops_.add(op);
  return op;
}

OpRef OpLifecycle::new_recv(int peer, void* buf, size_t capacity, uint64_t tag,
                            CompletionQueue* cq, uint64_t context,
                            std::shared_ptr<std::atomic<bool>> sibling) {
  if (peer != kAnySource) check_peer(peer, "recv");
  PolicyCompletionQueue* q = checked_cq(cq, "recv");
  if (!buf && capacity > 0) throw invalid_usage("null buffer", call_context(peer, "recv", capacity));
  OpRef op = new_op(OpType::kRecv, peer, q, context);
  op->local = static_cast<char*>(buf);
  op->length = capacity;
  op->tag = tag;
  op->sibling = std::move(sibling);
  return op;
}

bool OpLifecycle::admit(const OpRef& op) {
  ops_.add(op);
  const int peer = op->peer.load();
  if (peer < 0) return true;
  const PeerHealth* health = health_of(peer);
  if (health && health->failed.load()) {
    fail_remote(*op, health->reason());
    return false;
  }
  return true;
}

void OpLifecycle::succeed(Op& op) {
  std::shared_lock guard(report_guard_);
  if (op.claim()) report(op, nullptr);
}

void OpLifecycle::fail(Op& op, const Error& error) {
  std::shared_lock guard(report_guard_);
  if (op.claim()) report(op, std::make_shared<const Error>(error));
}

void OpLifecycle::fail_remote(Op& op, const std::string& why) {
  fail(op, remote_error(why, context_of(op)));
}

void OpLifecycle::report(Op& op, std::shared_ptr<const Error> error) {
  ops_.remove(op);
  if (reporting_stopped()) return;
  Completion c = completion_of(op);
  c.error = std::move(error);
  op.cq->push(std::move(c));
}

void OpLifecycle::complete_now(PolicyCompletionQueue* q, OpType type, int peer, size_t bytes,
                               uint64_t tag, uint64_t context,
                               std::shared_ptr<const Error> error) {
  if (reporting_stopped()) return;
  Completion c;
  c.context = context;
  c.op = type;
  c.peer = peer;
  c.bytes = bytes;
  c.tag = tag;
  c.error = std::move(error);
  q->push(std::move(c));
}

ErrorContext OpLifecycle::context_of(const Op& op) const {
  return {.rank = rank_,
          .peer = op.peer.load(std::memory_order_relaxed),
          .op = std::string(to_string(op.type)),
          .bytes = static_cast<int64_t>(op.length)};
}

bool OpLifecycle::truncated(Op& recv, uint64_t length) {
  if (length <= recv.length) return false;
  fail(recv, truncation_error(recv, length, context_of(recv)));
  return true;
}

void OpLifecycle::deliver_buffered(Op& recv, const UnexpectedMessage& message) {
  if (truncated(recv, message.length)) return;
  if (message.length > 0) {
    std::shared_lock lock(user_memory_guard_);
    if (recv.done()) return;
    std::memcpy(recv.local, message.data.data(), message.length);
  }
  succeed(recv);
}

void OpLifecycle::fail_if_no_sender(Op& recv, int peer) {
  if (peer != kAnySource) {
    const PeerHealth* health = health_of(peer);
    if (health && health->failed.load()) fail_remote(recv, health->reason());
    return;
  }
  if (recv.sibling) return;  // the other provider's peers may still send
  if (!any_peer_alive()) fail_remote(recv, "no peer is left to receive from");
}

bool OpLifecycle::any_peer_alive() const {
  for (int r = 0; r < size_; ++r)
    if (const PeerHealth* h = r == rank_ ? nullptr : health_of(r); h && !h->failed.load())
      return true;
  return false;
}

bool OpLifecycle::mark_failed(int peer, const std::string& why, bool orderly) {
  PeerHealth* health = health_of(peer);
  if (!health || !health->mark_failed(why)) return false;
  if (!orderly) {
    std::lock_guard lock(first_loss_mu_);
    if (first_loss_.empty()) first_loss_ = why;
  }
  log(orderly ? LogLevel::kInfo : LogLevel::kWarn, "rank ", rank_, ": ", provider_, " fabric '",
      name_, "': ", why);
  return true;
}

std::string OpLifecycle::first_loss() const {
  std::lock_guard lock(first_loss_mu_);
  return first_loss_;
}

std::string OpLifecycle::shut_down_reason(int peer, const std::string& its_first_loss) {
  std::string why = "rank " + std::to_string(peer) + " shut down its fabric";
  if (!its_first_loss.empty()) why += " after it had lost a peer: " + its_first_loss;
  return why;
}

std::function<bool(const Op&)> OpLifecycle::fails_with(int peer, bool orderly) const {
  // A receive from any source fails with the first peer that dies (it may be the one it
  // waits for), but not when a peer leaves in order, unless no peer is left at all.
  const bool any_source_too = !orderly || !any_peer_alive();
  return [=](const Op& op) {
    const int q = op.peer.load();
    // A sibling copy (composite fabric) must not fail because this provider's peers left
    // in order: the other provider's peers may still send.
    return q == peer ||
           (q == kAnySource && (!orderly || (any_source_too && op.sibling == nullptr)));
  };
}

void OpLifecycle::fail_all(const std::vector<OpRef>& ops, const std::string& why) {
  for (const OpRef& op : ops) fail_remote(*op, why);
}

std::vector<OpRef> OpLifecycle::ops_of(const CompletionQueue* cq) const {
  return ops_.select([&](const Op& op) { return op.cq == cq; });
}

void OpLifecycle::await_reports() { std::unique_lock reports(report_guard_); }

void OpLifecycle::await_user_memory_access() { std::unique_lock barrier(user_memory_guard_); }

void OpLifecycle::deliver_imm(int peer, uint64_t key, uint64_t offset, uint64_t bytes, uint32_t imm) {
  PolicyCompletionQueue* cq = imm_cq_.load();
  if (!cq) {
    log(LogLevel::kDebug, "rank ", rank_, ": dropped immediate ", imm, " from rank ", peer,
        ": no immediate completion queue is set");
    return;
  }
  if (reporting_stopped()) return;
  Completion c;
  c.op = OpType::kRemoteWriteImm;
  c.peer = peer;
  c.bytes = bytes;
  c.imm = imm;
  c.offset = offset;
  c.key = key;
  cq->push(std::move(c));
}

}  // namespace plait::transport
