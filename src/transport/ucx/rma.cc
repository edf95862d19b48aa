// One-sided operations over the UCX provider, checked by the target: a request travels as an
// active message (kAmRma, a write's data with it), the target's worker checks it against the
// memory registry (key, bounds, access, alignment) before touching memory, applies it under
// the region's pin, and answers (kAmReply: done, the read data, the old value, or why it
// refused). This works over every UCX transport and keeps the registry's contract (after
// deregistration returns, nothing touches the region); UCX still moves a large write or read
// reply by rendezvous. A write lands in a bounce buffer first and is copied in under the pin.
//
// With an immediate, the target delivers kRemoteWriteImm after the data is in place and
// before it acknowledges, so the initiator's completion also means the target was told.
#include <atomic>
#include <cstring>

#include "core/log.h"
#include "transport/ucx/ucx_api.h"
#include "transport/ucx/ucx_fabric.h"

namespace plait::transport::ucx {
namespace {

template <typename T>
std::vector<char> bytes_of(const T& value) {
  const char* p = reinterpret_cast<const char*>(&value);
  return std::vector<char>(p, p + sizeof value);
}

}  // namespace

// --- initiator side ---

void UcxFabric::submit_rma(const OpRef& op, const RmaHeader& h, const void* data, size_t bytes) {
  InFlight in;
  in.op = op;
  in.header = bytes_of(h);
  std::lock_guard lock(worker_mu_);
  if (op->done()) return;
  // The request's completion only says UCX is done with our buffer; the reply completes
  // the op. A failed request fails it at once.
  send_tracked(op->peer.load(), kAmRma, std::move(in), data, bytes,
               [](UcxFabric& f, InFlight& in, ucs_status_t status) {
                 if (status != UCS_OK) f.fail_with_status(*in.op, status, "one-sided request");
               });
}

void UcxFabric::write(int peer, const void* local, size_t len, const RemoteKey& rk,
                      uint64_t remote_offset, std::optional<uint32_t> imm, CompletionQueue* cq,
                      uint64_t context) {
  OpRef op = start_one_sided(OpType::kWrite, peer, cq, context, const_cast<void*>(local), len);
  if (!op) return;
  RmaHeader h;
  h.source = rank_;
  h.kind = RmaKind::kWrite;
  h.has_imm = imm.has_value();
  h.imm = imm.value_or(0);
  h.op = op->id;
  h.key = rk.key;
  h.offset = remote_offset;
  h.length = len;
  submit_rma(op, h, local, len);
}

void UcxFabric::read(int peer, void* local, size_t len, const RemoteKey& rk,
                     uint64_t remote_offset, CompletionQueue* cq, uint64_t context) {
  OpRef op = start_one_sided(OpType::kRead, peer, cq, context, local, len);
  if (!op) return;
  RmaHeader h;
  h.source = rank_;
  h.kind = RmaKind::kRead;
  h.op = op->id;
  h.key = rk.key;
  h.offset = remote_offset;
  h.length = len;
  submit_rma(op, h, nullptr, 0);
}

void UcxFabric::fetch_add(int peer, uint64_t* result, const RemoteKey& rk,
                          uint64_t remote_offset, uint64_t add, CompletionQueue* cq,
                          uint64_t context) {
  start_atomic(peer, result, rk, remote_offset, false, add, 0, cq, context);
}

void UcxFabric::compare_swap(int peer, uint64_t* result, const RemoteKey& rk,
                             uint64_t remote_offset, uint64_t expected, uint64_t desired,
                             CompletionQueue* cq, uint64_t context) {
  start_atomic(peer, result, rk, remote_offset, true, expected, desired, cq, context);
}

void UcxFabric::start_atomic(int peer, uint64_t* result, const RemoteKey& rk, uint64_t offset,
                             bool compare_swap, uint64_t arg0, uint64_t arg1,
                             CompletionQueue* cq, uint64_t context) {
  OpRef op = start_one_sided(compare_swap ? OpType::kCompareSwap : OpType::kFetchAdd, peer, cq,
                             context, result, sizeof(uint64_t));
  if (!op) return;
  RmaHeader h;
  h.source = rank_;
  h.kind = compare_swap ? RmaKind::kCompareSwap : RmaKind::kFetchAdd;
  h.op = op->id;
  h.key = rk.key;
  h.offset = offset;
  h.length = sizeof(uint64_t);
  h.arg0 = arg0;
  h.arg1 = arg1;
  submit_rma(op, h, nullptr, 0);
}

ucs_status_t UcxFabric::on_reply(void* arg, const void* header, size_t header_bytes, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  auto& f = *static_cast<UcxFabric*>(arg);
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  // Inside the callback, UCS_OK drops a rendezvous descriptor without pulling its data.
  auto drop = [] { return UCS_OK; };
  ReplyHeader r;
  if (header_bytes != sizeof r) return drop();
  std::memcpy(&r, header, sizeof r);
  const int source = f.checked_source(r.source, "reply");
  OpRef op = source < 0 ? nullptr : f.ops_.find(r.op);
  if (!op || op->done() || op->peer.load() != source) return drop();  // cancelled or failed
  if (r.denied) {
    std::string why = rndv || length > kMaxDenialBytes
                          ? std::string("refused by the target")
                          : std::string(static_cast<const char*>(data), length);
    f.fail(*op, invalid_usage(why, f.context_of(*op)));
    return UCS_OK;
  }
  switch (op->type) {
    case OpType::kWrite:
      f.succeed(*op);
      return drop();
    case OpType::kRead:
      if (length != op->length) {
        f.fail_remote(*op, "rank " + std::to_string(source) + " answered a read of " +
                               std::to_string(op->length) + " bytes with " +
                               std::to_string(length));
        return UCS_OK;
      }
      if (rndv) {
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.recv_am = &UcxFabric::on_recv_data_done;
        p.user_data = &f;
        InFlight in;
        in.op = op;
        f.track(ucx().ucp_am_recv_data_nbx(f.w_.worker, data, op->local, length, &p), std::move(in),
                [](UcxFabric& f, InFlight& in, ucs_status_t status) {
                  if (status == UCS_OK) f.succeed(*in.op);
                  else f.fail_with_status(*in.op, status, "read");
                });
        return UCS_INPROGRESS;
      }
      if (length > 0) {
        std::shared_lock guard(f.user_memory_guard_);
        if (op->done()) return UCS_OK;
        std::memcpy(op->local, data, length);
      }
      f.succeed(*op);
      return UCS_OK;
    default: {  // atomics
      {
        std::shared_lock guard(f.user_memory_guard_);
        if (op->done()) return drop();
        std::memcpy(op->local, &r.value, sizeof r.value);
      }
      f.succeed(*op);
      return drop();
    }
  }
}

// --- target side (inside the worker's progress, under worker_mu_) ---

ucs_status_t UcxFabric::on_rma(void* arg, const void* header, size_t header_bytes, void* data,
                               size_t length, const ucp_am_recv_param_t* param) {
  auto& f = *static_cast<UcxFabric*>(arg);
  const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  RmaHeader h;
  const int source =
      header_bytes == sizeof h ? (std::memcpy(&h, header, sizeof h), f.checked_source(h.source, "rma"))
                               : -1;
  if (source < 0 || f.peers_[source]->failed.load() ||
      (h.kind == RmaKind::kWrite ? length != h.length : length != 0)) {
    if (source >= 0 && !f.peers_[source]->failed.load())
      f.fail_peer(source, "rank " + std::to_string(source) + " sent a malformed one-sided request",
                  false);
    return UCS_OK;
  }
  switch (h.kind) {
    case RmaKind::kWrite: {
      if (!rndv) {
        f.apply_write(source, h, static_cast<const char*>(data), length);
        return UCS_OK;
      }
      // Refused before a byte moves: the initiator's data is never pulled.
      std::string denial;
      if (!f.registry_->check(h.key, h.offset, h.length, AccessKind::kWrite, &denial)) {
        ReplyHeader r;
        r.source = f.rank_;
        r.denied = 1;
        r.op = h.op;
        f.answer(source, r, std::vector<char>(denial.begin(), denial.end()));
        return UCS_OK;  // dropped: the initiator's data is never pulled
      }
      InFlight in;
      in.payload.resize(length);
      in.rma = h;
      char* bounce = in.payload.data();
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.recv_am = &UcxFabric::on_recv_data_done;
      p.user_data = &f;
      f.track(ucx().ucp_am_recv_data_nbx(f.w_.worker, data, bounce, length, &p), std::move(in),
              [](UcxFabric& f, InFlight& in, ucs_status_t status) {
                if (status == UCS_OK)
                  f.apply_write(in.rma.source, in.rma, in.payload.data(), in.payload.size());
              });
      return UCS_INPROGRESS;
    }
    case RmaKind::kRead:
      f.serve_read(source, h);
      break;
    case RmaKind::kFetchAdd:
    case RmaKind::kCompareSwap:
      f.serve_atomic(source, h);
      break;
    default:
      f.fail_peer(source, "rank " + std::to_string(source) + " sent a one-sided request of kind " +
                              std::to_string(int(h.kind)), false);
  }
  return UCS_OK;
}

void UcxFabric::apply_write(int peer, const RmaHeader& h, const char* data, size_t length) {
  ReplyHeader r;
  r.source = rank_;
  r.op = h.op;
  std::string denial;
  if (RegionRef region = registry_->check(h.key, h.offset, length, AccessKind::kWrite, &denial)) {
    if (auto pin = region->pin()) {
      if (length > 0) std::memcpy(region->base() + h.offset, data, length);
    } else {
      denial = "key " + format_key(h.key) + " was deregistered";
    }
  }
  if (denial.empty() && h.has_imm) deliver_imm(peer, h);
  r.denied = !denial.empty();
  answer(peer, r, std::vector<char>(denial.begin(), denial.end()));
}

void UcxFabric::serve_read(int peer, const RmaHeader& h) {
  ReplyHeader r;
  r.source = rank_;
  r.op = h.op;
  std::string denial;
  std::vector<char> payload;
  if (RegionRef region = registry_->check(h.key, h.offset, h.length, AccessKind::kRead, &denial)) {
    if (auto pin = region->pin()) {
      payload.assign(region->base() + h.offset, region->base() + h.offset + h.length);
    } else {
      denial = "key " + format_key(h.key) + " was deregistered";
    }
  }
  r.denied = !denial.empty();
  answer(peer, r, r.denied ? std::vector<char>(denial.begin(), denial.end()) : std::move(payload));
}

void UcxFabric::serve_atomic(int peer, const RmaHeader& h) {
  ReplyHeader r;
  r.source = rank_;
  r.op = h.op;
  std::string denial;
  if (RegionRef region =
          registry_->check(h.key, h.offset, sizeof(uint64_t), AccessKind::kAtomic, &denial)) {
    if (auto pin = region->pin()) {
      std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(region->base() + h.offset));
      if (h.kind == RmaKind::kCompareSwap) {
        uint64_t seen = h.arg0;
        word.compare_exchange_strong(seen, h.arg1);
        r.value = seen;  // the old value, whether or not it was swapped
      } else {
        r.value = word.fetch_add(h.arg0);
      }
    } else {
      denial = "key " + format_key(h.key) + " was deregistered";
    }
  }
  r.denied = !denial.empty();
  answer(peer, r, std::vector<char>(denial.begin(), denial.end()));
}

void UcxFabric::answer(int peer, const ReplyHeader& r, std::vector<char> payload) {
  if (!w_.eps[peer] || peers_[peer]->failed.load()) return;
  if (r.denied) {
    const std::string prefix = "remote access denied by rank " + std::to_string(rank_) + ": ";
    payload.insert(payload.begin(), prefix.begin(), prefix.end());
    if (payload.size() > kMaxDenialBytes) payload.resize(kMaxDenialBytes);
  }
  InFlight in;
  in.header = bytes_of(r);
  const char* data = payload.data();
  const size_t bytes = payload.size();
  in.payload = std::move(payload);  // a vector's move keeps its buffer where UCX reads it
  send_tracked(peer, kAmReply, std::move(in), data, bytes, nullptr);
}

void UcxFabric::deliver_imm(int peer, const RmaHeader& h) {
  PolicyCompletionQueue* cq = imm_cq_.load();
  if (!cq) {
    log(LogLevel::kDebug, "rank ", rank_, ": dropped immediate ", h.imm, " from rank ", peer,
        ": no immediate completion queue is set");
    return;
  }
  if (reporting_stopped()) return;
  Completion c;
  c.op = OpType::kRemoteWriteImm;
  c.peer = peer;
  c.bytes = h.length;
  c.imm = h.imm;
  c.offset = h.offset;
  c.key = h.key;
  cq->push(std::move(c));
}

}  // namespace plait::transport::ucx
