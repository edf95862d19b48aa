// One-sided operations over shared memory.
//
//   write / read (CMA)   the initiator does it all: finds the key in the target's
//                        registration table, pins it, checks bounds and access on the pinned
//                        entry (before any byte is touched), copies with process_vm_writev /
//                        readv straight between its buffer and the target's region, unpins.
//                        One copy, no action by the target's CPU. Small ones run inside the
//                        call; large ones in chunks on the drainer, each under its own pin,
//                        so a deregistration waits for one chunk at most. A write with an
//                        immediate then sends kWriteImm: the data is in place before the
//                        target reads it, and the target delivers kRemoteWriteImm.
//   write / read (ring)  without CMA between the pair, or for a key the target has not
//                        published (not registered, or its table was full), the target's
//                        progress engine plays the NIC, as in the tcp provider: it checks
//                        the request against its registry and copies between the ring and
//                        the region (kWrite pieces acknowledged one by one; kReadReq answered
//                        by kReadResp pieces).
//   atomics              always executed by the target's progress engine: user memory is
//                        private to its process, and process_vm_writev is a copy, not an
//                        atomic read-modify-write, so only the owner can apply a 64-bit
//                        fetch-and-add or compare-and-swap (with __atomic builtins) that is
//                        atomic against its own threads and other initiators.
#include <cstring>

#include "core/log.h"
#include "transport/shm/cma.h"
#include "transport/shm/shm_fabric.h"

namespace plait::transport::shm {
namespace {

// Larger copies go to the drainer in chunks of this size, each under one pin.
constexpr size_t kInlineRmaBytes = 256 << 10;
constexpr size_t kRmaChunk = 1 << 20;

size_t pieces(size_t len, size_t chunk) { return len == 0 ? 1 : (len + chunk - 1) / chunk; }

}  // namespace

Error ShmFabric::cma_error(Peer& p, int err, const char* call, const ErrorContext& ctx) {
  if (err == ESRCH) {
    const std::string why = "rank " + std::to_string(p.rank) + " (pid " +
                            std::to_string(p.link.pid) + ") is gone: " + call + " failed";
    return remote_error(why, ctx);
  }
  char buf[256];
  return remote_error(std::string(call) + " with rank " + std::to_string(p.rank) +
                          " failed: " + strerror_r(err, buf, sizeof buf),
                      ctx);
}

void ShmFabric::announce_write(Peer& p, uint64_t key, uint64_t offset, size_t len, uint32_t imm) {
  Record r;
  r.type = RecordType::kWriteImm;
  r.imm = imm;
  r.tag = key;
  r.word = offset;
  r.arg0 = len;
  send_record(p, r);
}

void ShmFabric::write(int peer, const void* local, size_t len, const RemoteKey& rk,
                      uint64_t remote_offset, std::optional<uint32_t> imm, CompletionQueue* cq,
                      uint64_t context) {
  Peer& p = *checked_peer(peer, "write");
  PolicyCompletionQueue* q = checked_cq(cq, "write");
  const ErrorContext ctx = call_context(peer, "write", len);
  if (!local && len > 0) throw invalid_usage("null buffer", ctx);
  PinnedRegion region;
  if (p.link.cma && !p.failed.load() && p.regions.pin(rk.key, &region)) {
    std::string why = access_denial(rk.key, region.addr, region.length, region.access,
                                    remote_offset, len, AccessKind::kWrite);
    if (!why.empty() || len <= kInlineRmaBytes) {
      int err = why.empty() && len > 0
                    ? cma_write(p.link.pid, local, region.addr + remote_offset, len)
                    : 0;
      p.regions.unpin(region);
      if (!why.empty())
        return complete_now(q, OpType::kWrite, peer, len, 0, context,
                            std::make_shared<const Error>(denial(p, why, ctx)));
      if (err != 0)
        return complete_now(q, OpType::kWrite, peer, len, 0, context,
                            std::make_shared<const Error>(cma_error(p, err, "process_vm_writev", ctx)));
      if (imm) announce_write(p, rk.key, remote_offset, len, *imm);
      return complete_now(q, OpType::kWrite, peer, len, 0, context);
    }
    p.regions.unpin(region);
    OpRef op = new_op(OpType::kWrite, peer, q, context);
    op->local = const_cast<char*>(static_cast<const char*>(local));
    op->length = len;
    if (!admit(op)) return;
    Transfer t;
    t.kind = Transfer::Kind::kWrite;
    t.op = op;
    t.peer = &p;
    t.remote = remote_offset;
    t.region = region;
    t.key = rk.key;
    t.imm = imm;
    queue_transfer(std::move(t));
    return;
  }
  OpRef op = new_op(OpType::kWrite, peer, q, context);
  op->local = const_cast<char*>(static_cast<const char*>(local));
  op->length = len;
  if (!admit(op)) return;
  start_fallback_write(p, op, rk, remote_offset, imm);
}

void ShmFabric::read(int peer, void* local, size_t len, const RemoteKey& rk,
                     uint64_t remote_offset, CompletionQueue* cq, uint64_t context) {
  Peer& p = *checked_peer(peer, "read");
  PolicyCompletionQueue* q = checked_cq(cq, "read");
  const ErrorContext ctx = call_context(peer, "read", len);
  if (!local && len > 0) throw invalid_usage("null buffer", ctx);
  PinnedRegion region;
  if (p.link.cma && !p.failed.load() && p.regions.pin(rk.key, &region)) {
    std::string why = access_denial(rk.key, region.addr, region.length, region.access,
                                    remote_offset, len, AccessKind::kRead);
    if (!why.empty() || len <= kInlineRmaBytes) {
      int err = why.empty() && len > 0
                    ? cma_read(p.link.pid, local, region.addr + remote_offset, len)
                    : 0;
      p.regions.unpin(region);
      if (!why.empty())
        return complete_now(q, OpType::kRead, peer, len, 0, context,
                            std::make_shared<const Error>(denial(p, why, ctx)));
      if (err != 0)
        return complete_now(q, OpType::kRead, peer, len, 0, context,
                            std::make_shared<const Error>(cma_error(p, err, "process_vm_readv", ctx)));
      return complete_now(q, OpType::kRead, peer, len, 0, context);
    }
    p.regions.unpin(region);
    OpRef op = new_op(OpType::kRead, peer, q, context);
    op->local = static_cast<char*>(local);
    op->length = len;
    if (!admit(op)) return;
    Transfer t;
    t.kind = Transfer::Kind::kRead;
    t.op = op;
    t.peer = &p;
    t.remote = remote_offset;
    t.region = region;
    t.key = rk.key;
    queue_transfer(std::move(t));
    return;
  }
  OpRef op = new_op(OpType::kRead, peer, q, context);
  op->local = static_cast<char*>(local);
  op->length = len;
  if (!admit(op)) return;
  start_fallback_read(p, op, rk, remote_offset);
}

bool ShmFabric::step_rma(Transfer& t) {
  Op& op = *t.op;
  Peer& p = *t.peer;
  if (op.done()) return true;  // cancelled or failed: the rest is not copied
  const bool writing = t.kind == Transfer::Kind::kWrite;
  const size_t n = std::min(kRmaChunk, op.length - t.done);
  if (!p.regions.repin(t.region)) {
    fail(op, denial(p, "key " + format_key(t.key) + " was deregistered while the " +
                           (writing ? "write was landing" : "read was served"),
                    context_of(op)));
    return true;
  }
  const uint64_t remote = t.region.addr + t.remote + t.done;
  int err;
  if (writing) {
    err = cma_write(p.link.pid, op.local + t.done, remote, n);
  } else {
    std::shared_lock lock(user_memory_guard_);
    err = op.done() ? 0 : cma_read(p.link.pid, op.local + t.done, remote, n);
  }
  p.regions.unpin(t.region);
  if (err != 0) {
    fail(op, cma_error(p, err, writing ? "process_vm_writev" : "process_vm_readv",
                       context_of(op)));
    return true;
  }
  t.done += n;
  if (t.done < op.length) return false;
  if (writing && t.imm) announce_write(p, t.key, t.remote, op.length, *t.imm);
  succeed(op);
  return true;
}

void ShmFabric::start_fallback_write(Peer& p, const OpRef& op, const RemoteKey& rk,
                                     uint64_t offset, std::optional<uint32_t> imm) {
  const size_t chunk = p.outbox.max_payload();
  op->parts_left.store(pieces(op->length, chunk));  // one acknowledgement per piece
  Pending item;
  item.kind = Pending::Kind::kStream;
  item.header.type = RecordType::kWrite;
  item.header.flags = imm ? kFlagImm : 0;
  item.header.imm = imm.value_or(0);
  item.header.id = op->id;
  item.header.tag = rk.key;
  item.header.word = offset;
  item.header.arg0 = op->length;
  item.header.arg1 = offset;
  item.op = op;
  item.source = op->local;
  item.total = op->length;
  item.chunk = chunk;
  p.outbox.post(std::move(item));
}

void ShmFabric::start_fallback_read(Peer& p, const OpRef& op, const RemoteKey& rk,
                                    uint64_t offset) {
  // The responses come through our inbox from this peer: pieces that fit it.
  const size_t chunk = own_view_.geometry().ring_capacity / 4 - sizeof(Record);
  const size_t n = pieces(op->length, chunk);
  op->parts_left.store(n);  // one response per piece
  for (size_t i = 0; i < n; ++i) {
    Record r;
    r.type = RecordType::kReadReq;
    r.id = op->id;
    r.tag = rk.key;
    r.word = offset + i * chunk;
    r.arg0 = i * chunk;
    r.arg1 = std::min(chunk, op->length - i * chunk);
    send_record(p, r);
  }
}

void ShmFabric::fetch_add(int peer, uint64_t* result, const RemoteKey& rk,
                          uint64_t remote_offset, uint64_t add, CompletionQueue* cq,
                          uint64_t context) {
  start_atomic(peer, result, rk, remote_offset, false, add, 0, cq, context);
}

void ShmFabric::compare_swap(int peer, uint64_t* result, const RemoteKey& rk,
                             uint64_t remote_offset, uint64_t expected, uint64_t desired,
                             CompletionQueue* cq, uint64_t context) {
  start_atomic(peer, result, rk, remote_offset, true, expected, desired, cq, context);
}

void ShmFabric::start_atomic(int peer, uint64_t* result, const RemoteKey& rk, uint64_t offset,
                             bool compare_swap, uint64_t arg0, uint64_t arg1,
                             CompletionQueue* cq, uint64_t context) {
  const char* name = compare_swap ? "compare_swap" : "fetch_add";
  Peer& p = *checked_peer(peer, name);
  PolicyCompletionQueue* q = checked_cq(cq, name);
  if (!result) throw invalid_usage("null result pointer", call_context(peer, name, 8));
  OpRef op = new_op(compare_swap ? OpType::kCompareSwap : OpType::kFetchAdd, peer, q, context);
  op->local = reinterpret_cast<char*>(result);
  op->length = sizeof(uint64_t);
  op->parts_left.store(1);
  if (!admit(op)) return;
  Record r;
  r.type = RecordType::kAtomic;
  r.flags = compare_swap ? kFlagCompareSwap : 0;
  r.id = op->id;
  r.tag = rk.key;
  r.word = offset;
  r.arg0 = arg0;
  r.arg1 = arg1;
  send_record(p, r);
}

// --- target side (drainer) ---

void ShmFabric::reply(Peer& p, Record r, const std::string& why) {
  std::string payload;
  if (!why.empty()) {
    r.flags |= kFlagDenied;
    payload = "remote access denied by rank " + std::to_string(rank_) + ": " + why;
    if (payload.size() > kMaxReasonBytes) payload.resize(kMaxReasonBytes);
  }
  send_record(p, r, std::move(payload));
}

void ShmFabric::on_write(Peer& p, const Record& r, const char* payload) {
  std::string why;
  if (RegionRef region = registry_->check(r.tag, r.word, r.payload, AccessKind::kWrite, &why)) {
    if (auto pin = region->pin()) {
      if (r.payload > 0) std::memcpy(region->base() + r.word, payload, r.payload);
    } else {
      why = "key " + format_key(r.tag) + " was deregistered while the write was landing";
    }
  }
  if (r.flags & kFlagImm) {
    const bool last = r.word + r.payload == r.arg1 + r.arg0;
    if (!why.empty()) p.denied_imm_writes.insert(r.id);
    if (last && p.denied_imm_writes.erase(r.id) == 0 && why.empty())
      deliver_imm(p.rank, r.tag, r.arg1, r.arg0, r.imm);
  }
  Record ack;
  ack.type = RecordType::kWriteAck;
  ack.id = r.id;
  ack.arg0 = r.payload;
  reply(p, ack, why);
}

void ShmFabric::on_write_imm(Peer& p, const Record& r) {
  deliver_imm(p.rank, r.tag, r.word, r.arg0, r.imm);
}

void ShmFabric::on_read_request(Peer& p, const Record& r) {
  Record resp;
  resp.type = RecordType::kReadResp;
  resp.id = r.id;
  resp.arg0 = r.arg0;
  std::string why;
  RegionRef region = registry_->check(r.tag, r.word, r.arg1, AccessKind::kRead, &why);
  if (!region || r.arg1 > p.outbox.max_payload()) {
    if (region) why = "read piece of " + std::to_string(r.arg1) + " bytes exceeds the ring";
    reply(p, resp, why);
    return;
  }
  // Copied into the ring under the region's pin when there is room (maybe right now).
  Pending item;
  item.kind = Pending::Kind::kRegionRead;
  item.header = resp;
  item.region = std::move(region);
  item.offset = r.word;
  item.total = r.arg1;
  item.if_revoked = "remote access denied by rank " + std::to_string(rank_) + ": key " +
                    format_key(r.tag) + " was deregistered before the read was served";
  p.outbox.post(std::move(item));
}

void ShmFabric::on_atomic(Peer& p, const Record& r) {
  Record resp;
  resp.type = RecordType::kAtomicResp;
  resp.id = r.id;
  std::string why;
  if (RegionRef region =
          registry_->check(r.tag, r.word, sizeof(uint64_t), AccessKind::kAtomic, &why)) {
    if (auto pin = region->pin()) {
      auto* word = reinterpret_cast<uint64_t*>(region->base() + r.word);
      if (r.flags & kFlagCompareSwap) {
        uint64_t seen = r.arg0;
        __atomic_compare_exchange_n(word, &seen, r.arg1, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
        resp.arg0 = seen;  // the old value, whether or not it was swapped
      } else {
        resp.arg0 = __atomic_fetch_add(word, r.arg0, __ATOMIC_SEQ_CST);
      }
    } else {
      why = "key " + format_key(r.tag) + " was deregistered";
    }
  }
  reply(p, resp, why);
}

// --- initiator side: replies (drainer) ---

void ShmFabric::on_reply(Peer& p, const Record& r, const char* payload) {
  OpRef op = ops_.find(r.id);
  if (!op || op->done()) return;  // cancelled or failed meanwhile
  bool type_ok = false;
  switch (r.type) {
    case RecordType::kWriteAck: type_ok = op->type == OpType::kWrite; break;
    case RecordType::kReadResp: type_ok = op->type == OpType::kRead; break;
    default: type_ok = op->type == OpType::kFetchAdd || op->type == OpType::kCompareSwap;
  }
  if (!type_ok || op->peer.load() != p.rank)
    throw remote_error("reply for op " + std::to_string(r.id) + " of another kind or peer");
  if (r.flags & kFlagDenied) {
    if (!op->first_error)
      op->first_error = std::make_shared<const Error>(
          invalid_usage(std::string(payload, r.payload), context_of(*op)));
  } else if (r.type == RecordType::kReadResp) {
    if (r.arg0 > op->length || r.payload > op->length - r.arg0)
      throw remote_error("read response outside the read's buffer");
    std::shared_lock lock(user_memory_guard_);
    if (op->done()) return;
    if (r.payload > 0) std::memcpy(op->local + r.arg0, payload, r.payload);
  } else if (r.type == RecordType::kAtomicResp) {
    std::shared_lock lock(user_memory_guard_);
    if (op->done()) return;
    std::memcpy(op->local, &r.arg0, sizeof r.arg0);
  }
  if (op->parts_left.fetch_sub(1) == 1) {
    if (op->first_error)
      fail(*op, *op->first_error);
    else
      succeed(*op);
  }
}

}  // namespace plait::transport::shm
