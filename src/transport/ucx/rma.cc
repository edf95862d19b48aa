// One-sided operations over the UCX provider, the initiator's side: UCP's own put, get and
// atomics on the target's memory, which the target mapped with ucp_mem_map (on a NIC with
// RDMA, the target's CPU takes no part).
//
// plait's RemoteKey is {addr, length, key}, small and fixed, so that users can exchange it
// any way they like. The packed UCP remote key (its size depends on the transports: tens to
// hundreds of bytes) is fetched from the target on the first access to (peer, key), with the
// region's base, length and access flags, and kept until the target revokes it. Every access
// is checked here against that region (bounds, access flags, alignment, with the target's
// words) before UCX is asked: a wrong key or an out-of-bounds access fails with the target's
// reason and touches nothing.
//
// Completion: a read or an atomic completes when its data is here. A write completes once
// an endpoint flush says it reached the target's memory (the same meaning as in the other
// providers: a completed write can be followed by a message that says "it is there"). With
// an immediate, the flush is followed by kAmImm; the target delivers kRemoteWriteImm and
// answers, and the write completes on that answer: the data is in place before the target
// hears of it, and when the initiator's write completes the target's queue has it.
#include <cstring>

#include "core/log.h"
#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_fabric.h"

namespace plait::transport::ucx {
namespace {

AccessKind access_kind(OpType type) {
  switch (type) {
    case OpType::kWrite:
      return AccessKind::kWrite;
    case OpType::kRead:
      return AccessKind::kRead;
    default:
      return AccessKind::kAtomic;
  }
}

}  // namespace

void UcxFabric::write(int peer, const void* local, size_t len, const RemoteKey& rk,
                      uint64_t remote_offset, std::optional<uint32_t> imm, CompletionQueue* cq,
                      uint64_t context) {
  OpRef op = start_one_sided(OpType::kWrite, peer, cq, context, const_cast<void*>(local), len);
  if (!op) return;
  start_rma(op, {.type = OpType::kWrite, .key = rk.key, .offset = remote_offset, .length = len,
                 .imm = imm});
}

void UcxFabric::read(int peer, void* local, size_t len, const RemoteKey& rk,
                     uint64_t remote_offset, CompletionQueue* cq, uint64_t context) {
  OpRef op = start_one_sided(OpType::kRead, peer, cq, context, local, len);
  if (!op) return;
  start_rma(op, {.type = OpType::kRead, .key = rk.key, .offset = remote_offset, .length = len});
}

void UcxFabric::fetch_add(int peer, uint64_t* result, const RemoteKey& rk,
                          uint64_t remote_offset, uint64_t add, CompletionQueue* cq,
                          uint64_t context) {
  OpRef op = start_one_sided(OpType::kFetchAdd, peer, cq, context, result, sizeof(uint64_t));
  if (!op) return;
  start_rma(op, {.type = OpType::kFetchAdd, .key = rk.key, .offset = remote_offset,
                 .length = sizeof(uint64_t), .arg0 = add});
}

void UcxFabric::compare_swap(int peer, uint64_t* result, const RemoteKey& rk,
                             uint64_t remote_offset, uint64_t expected, uint64_t desired,
                             CompletionQueue* cq, uint64_t context) {
  OpRef op = start_one_sided(OpType::kCompareSwap, peer, cq, context, result, sizeof(uint64_t));
  if (!op) return;
  start_rma(op, {.type = OpType::kCompareSwap, .key = rk.key, .offset = remote_offset,
                 .length = sizeof(uint64_t), .arg0 = expected, .arg1 = desired});
}

void UcxFabric::start_rma(const OpRef& op, const RmaArgs& a) {
  const int peer = op->peer.load();
  std::lock_guard lock(worker_mu_);
  if (op->done()) return;  // its peer failed meanwhile
  auto [it, fresh] = remote_regions_.try_emplace({peer, a.key});
  RemoteRegion& r = it->second;
  if (r.ready) return issue_rma(op, a, r);
  r.waiting.emplace_back(op, a);
  if (!fresh) return;  // asked already
  KeyRequest request;
  request.source = rank_;
  request.key = a.key;
  InFlight in;
  in.header = bytes_of(request);
  in.rma = a;
  send_tracked(peer, kAmKeyRequest, std::move(in), nullptr, 0,
               [](UcxFabric& f, InFlight& in, ucs_status_t status) {
                 if (status != UCS_OK)
                   f.fail_waiting(in.peer, in.rma.key,
                                  std::string("UCX could not ask for the remote key: ") +
                                      ucx().ucs_status_string(status));
               },
               UCP_AM_SEND_FLAG_EAGER);
}

void UcxFabric::fail_waiting(int peer, uint64_t key, const std::string& why) {
  auto it = remote_regions_.find({peer, key});
  if (it == remote_regions_.end() || it->second.ready) return;
  std::vector<std::pair<OpRef, RmaArgs>> waiting = std::move(it->second.waiting);
  remote_regions_.erase(it);
  for (auto& [op, a] : waiting)
    if (!op->done()) fail(*op, invalid_usage(why, context_of(*op)));
}

void UcxFabric::issue_rma(const OpRef& op, const RmaArgs& a, const RemoteRegion& r) {
  if (op->done()) return;
  const int peer = op->peer.load();
  if (!w_.eps[peer]) return fail_with_status(*op, UCS_ERR_NOT_CONNECTED, "one-sided operation");
  std::string denial =
      access_denial(a.key, r.base, r.length, r.access, a.offset, a.length, access_kind(a.type));
  if (!denial.empty()) {
    fail(*op, invalid_usage("remote access denied by rank " + std::to_string(peer) + ": " +
                                denial, context_of(*op)));
    return;
  }
  expect_transfer(a.length);
  switch (a.type) {
    case OpType::kWrite:
      return post_write(op, a, r);
    case OpType::kRead: {
      if (a.length == 0) return succeed(*op);
      ucp_request_param_t p = send_param();
      InFlight in;
      in.op = op;
      in.peer = peer;
      track(ucx().ucp_get_nbx(w_.eps[peer], op->local, a.length, r.base + a.offset, r.rkey, &p),
            std::move(in), [](UcxFabric& f, InFlight& in, ucs_status_t status) {
              if (status == UCS_OK) f.succeed(*in.op);
              else f.fail_with_status(*in.op, status, "get");
            });
      return;
    }
    default:
      return post_atomic(op, a, r);
  }
}

void UcxFabric::post_write(const OpRef& op, const RmaArgs& a, const RemoteRegion& r) {
  const int peer = op->peer.load();
  if (a.length == 0 && !a.imm) return succeed(*op);
  if (a.length > 0) {
    ucp_request_param_t p = send_param();
    InFlight in;
    in.op = op;
    in.peer = peer;
    track(ucx().ucp_put_nbx(w_.eps[peer], op->local, a.length, r.base + a.offset, r.rkey, &p),
          std::move(in), [](UcxFabric& f, InFlight& in, ucs_status_t status) {
            if (status != UCS_OK) f.fail_with_status(*in.op, status, "put");
          });
  }
  write_flushes_[peer].next.emplace_back(op, a);
  if (!write_flushes_[peer].in_flight) flush_writes(peer);
}

void UcxFabric::flush_writes(int peer) {
  WriteFlush& wf = write_flushes_[peer];
  wf.in_flight = true;
  InFlight in;
  in.peer = peer;
  in.writes = std::move(wf.next);
  wf.next.clear();
  // The flush completes once every put posted before it is in the target's memory.
  ucp_request_param_t p = send_param();
  track(ucx().ucp_ep_flush_nbx(w_.eps[peer], &p), std::move(in),
        [](UcxFabric& f, InFlight& in, ucs_status_t status) { f.writes_flushed(in, status); });
}

void UcxFabric::writes_flushed(InFlight& in, ucs_status_t status) {
  for (auto& [op, a] : in.writes) {
    if (op->done()) continue;
    if (status != UCS_OK) {
      fail_with_status(*op, status, "flush of a write");
      continue;
    }
    if (!a.imm) {
      succeed(*op);
      continue;
    }
    ImmHeader h;
    h.source = rank_;
    h.imm = *a.imm;
    h.op = op->id;
    h.key = a.key;
    h.offset = a.offset;
    h.length = a.length;
    InFlight notify;
    notify.op = op;
    notify.header = bytes_of(h);
    send_tracked(in.peer, kAmImm, std::move(notify), nullptr, 0,
                 [](UcxFabric& f, InFlight& in, ucs_status_t status) {
                   if (status != UCS_OK)
                     f.fail_with_status(*in.op, status, "immediate of a write");
                 },
                 UCP_AM_SEND_FLAG_EAGER);
  }
  WriteFlush& wf = write_flushes_[in.peer];
  wf.in_flight = false;
  if (!wf.next.empty() && w_.eps[in.peer]) flush_writes(in.peer);
}

void UcxFabric::post_atomic(const OpRef& op, const RmaArgs& a, const RemoteRegion& r) {
  const int peer = op->peer.load();
  // Our own operand and result words (UCX reads and writes them until it completes): the
  // user's result is written only by a completion that still stands.
  InFlight in;
  in.op = op;
  in.peer = peer;
  in.payload.resize(2 * sizeof(uint64_t));
  uint64_t* operand = reinterpret_cast<uint64_t*>(in.payload.data());
  uint64_t* result = operand + 1;
  ucp_request_param_t p = send_param();
  p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
  p.datatype = ucp_dt_make_contig(sizeof(uint64_t));
  p.reply_buffer = result;
  ucp_atomic_op_t opcode;
  if (a.type == OpType::kCompareSwap) {
    opcode = UCP_ATOMIC_OP_CSWAP;  // compares with *operand, swaps in *result, returns old
    *operand = a.arg0;
    *result = a.arg1;
  } else {
    opcode = UCP_ATOMIC_OP_ADD;
    *operand = a.arg0;
  }
  ucs_status_ptr_t request =
      ucx().ucp_atomic_op_nbx(w_.eps[peer], opcode, operand, 1, r.base + a.offset, r.rkey, &p);
  track(request, std::move(in), [](UcxFabric& f, InFlight& in, ucs_status_t status) {
    Op& op = *in.op;
    if (status != UCS_OK) return f.fail_with_status(op, status, "atomic");
    {
      std::shared_lock guard(f.user_memory_guard_);
      if (op.done()) return;
      std::memcpy(op.local, in.payload.data() + sizeof(uint64_t), sizeof(uint64_t));
    }
    f.succeed(op);
  });
}

ucs_status_t UcxFabric::on_key_reply(void* arg, const void* header, size_t header_bytes,
                                     void* data, size_t length,
                                     const ucp_am_recv_param_t* param) {
  auto& f = *static_cast<UcxFabric*>(arg);
  KeyReply k;
  if (!read_header(header, header_bytes, &k)) return UCS_OK;
  const int source = f.checked_source(k.source, "key reply");
  if (source < 0 || !f.w_.eps[source]) return UCS_OK;
  auto it = f.remote_regions_.find({source, k.key});
  if (it == f.remote_regions_.end() || it->second.ready) return UCS_OK;
  const std::string prefix = "remote access denied by rank " + std::to_string(source) + ": ";
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    f.fail_waiting(source, k.key, prefix + "its remote key came by rendezvous");
    return UCS_OK;
  }
  if (k.denied) {
    f.fail_waiting(source, k.key,
                   prefix + std::string(bounded_text(data, length)));
    return UCS_OK;
  }
  RemoteRegion& r = it->second;
  if (length > 0) {
    const ucs_status_t s = ucx().ucp_ep_rkey_unpack(f.w_.eps[source], data, &r.rkey);
    if (s != UCS_OK) {
      f.fail_waiting(source, k.key,
                     "UCX could not unpack rank " + std::to_string(source) + "'s remote key " +
                         format_key(k.key) + ": " + ucx().ucs_status_string(s));
      return UCS_OK;
    }
  }
  r.ready = true;
  r.base = k.base;
  r.length = k.length;
  r.access = k.access;
  std::vector<std::pair<OpRef, RmaArgs>> waiting = std::move(r.waiting);
  for (auto& [op, a] : waiting) f.issue_rma(op, a, r);
  return UCS_OK;
}

ucs_status_t UcxFabric::on_key_revoke(void* arg, const void* header, size_t header_bytes, void*,
                                      size_t, const ucp_am_recv_param_t*) {
  auto& f = *static_cast<UcxFabric*>(arg);
  KeyRevoke k;
  if (!read_header(header, header_bytes, &k)) return UCS_OK;
  const int source = f.checked_source(k.source, "key revocation");
  if (source < 0 || f.peers_[source]->failed.load() || !f.w_.eps[source]) return UCS_OK;
  InFlight in;
  in.peer = source;
  in.rma.key = k.key;
  if (auto it = f.remote_regions_.find({source, k.key}); it != f.remote_regions_.end()) {
    in.rkey = it->second.rkey;
    f.fail_waiting(source, k.key, "remote access denied by rank " + std::to_string(source) +
                                      ": " + unregistered_denial(k.key));
    f.remote_regions_.erase({source, k.key});
  }
  // Every access made with the key so far reaches the target before it hears back.
  ucp_request_param_t p = f.send_param();
  f.track(ucx().ucp_ep_flush_nbx(f.w_.eps[source], &p), std::move(in),
          [](UcxFabric& f, InFlight& in, ucs_status_t) {
            if (in.rkey) ucx().ucp_rkey_destroy(in.rkey);
            if (f.peers_[in.peer]->failed.load()) return;
            KeyRevoke done;
            done.source = f.rank_;
            done.key = in.rma.key;
            InFlight answer;
            answer.header = bytes_of(done);
            f.send_tracked(in.peer, kAmKeyRevoked, std::move(answer), nullptr, 0, nullptr,
                           UCP_AM_SEND_FLAG_EAGER);
          });
  return UCS_OK;
}

ucs_status_t UcxFabric::on_imm_done(void* arg, const void* header, size_t header_bytes, void*,
                                    size_t, const ucp_am_recv_param_t*) {
  auto& f = *static_cast<UcxFabric*>(arg);
  ImmDone d;
  if (!read_header(header, header_bytes, &d)) return UCS_OK;
  const int source = f.checked_source(d.source, "immediate answer");
  OpRef op = source < 0 ? nullptr : f.ops_.find(d.op);
  if (op && !op->done() && op->peer.load() == source && op->type == OpType::kWrite)
    f.succeed(*op);
  return UCS_OK;
}

void UcxFabric::forget_remote_regions() {
  for (auto& [where, r] : remote_regions_)
    if (r.rkey) ucx().ucp_rkey_destroy(r.rkey);
  remote_regions_.clear();
}

}  // namespace plait::transport::ucx
