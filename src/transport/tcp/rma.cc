// One-sided operations over the TCP provider. Whoever reads the target's sockets (its
// progress thread, or a caller polling inline) plays the NIC:
// it checks every request against the memory registry (key, bounds, access, alignment)
// before touching memory, applies it, and acknowledges. A refused request is answered with
// the reason, and a refused write's payload is read and dropped so the stream stays in sync.
//
//   write    kWrite pieces striped over the streams, each acknowledged (kWriteAck) on the
//            stream it came in on; the initiator completes when every piece is acknowledged.
//            With an immediate, the target delivers kRemoteWriteImm once every piece is in,
//            before acknowledging the last one.
//   read     one kReadReq per stripe; each kReadResp lands straight in the local buffer.
//   atomics  kAtomic / kAtomicResp on stream 0, applied with std::atomic_ref on the target.
#include <atomic>
#include <cstring>

#include "core/log.h"
#include "transport/tcp/tcp_fabric.h"

namespace plait::transport::tcp {
namespace {

std::shared_ptr<const std::atomic<bool>> finished_flag(const OpRef& op) {
  return {op, &op->finished};
}

}  // namespace

void TcpFabric::write(int peer, const void* local, size_t len, const RemoteKey& rk,
                      uint64_t remote_offset, std::optional<uint32_t> imm, CompletionQueue* cq,
                      uint64_t context) {
  OpRef op = start_one_sided(OpType::kWrite, peer, cq, context, const_cast<void*>(local), len);
  if (!op) return;

  const size_t n = pieces(len);
  op->parts_left.store(n);  // one acknowledgement per piece
  for (size_t i = 0; i < n; ++i) {
    size_t offset = i * stripe_bytes_;
    Frame f;
    f.header.type = MessageType::kWrite;
    f.header.flags = imm ? kFlagImm : 0;
    f.header.imm = imm.value_or(0);
    f.header.id = op->id;
    f.header.tag = rk.key;
    f.header.word = remote_offset + offset;
    f.header.length = std::min(stripe_bytes_, len - offset);
    f.header.arg0 = len;
    f.header.arg1 = remote_offset;
    f.payload = op->local + offset;
    f.op = op;
    submit(peer, live_stream(peer, i), std::move(f));
  }
}

void TcpFabric::read(int peer, void* local, size_t len, const RemoteKey& rk,
                     uint64_t remote_offset, CompletionQueue* cq, uint64_t context) {
  OpRef op = start_one_sided(OpType::kRead, peer, cq, context, local, len);
  if (!op) return;

  const size_t n = pieces(len);
  op->parts_left.store(n);  // one response per piece
  for (size_t i = 0; i < n; ++i) {
    size_t offset = i * stripe_bytes_;
    Frame f;
    f.header.type = MessageType::kReadReq;
    f.header.id = op->id;
    f.header.tag = rk.key;
    f.header.word = remote_offset + offset;
    f.header.arg0 = offset;
    f.header.arg1 = std::min(stripe_bytes_, len - offset);
    f.op = op;
    submit(peer, live_stream(peer, i), std::move(f));
  }
}

void TcpFabric::fetch_add(int peer, uint64_t* result, const RemoteKey& rk,
                          uint64_t remote_offset, uint64_t add, CompletionQueue* cq,
                          uint64_t context) {
  start_atomic(peer, result, rk, remote_offset, false, add, 0, cq, context);
}

void TcpFabric::compare_swap(int peer, uint64_t* result, const RemoteKey& rk,
                             uint64_t remote_offset, uint64_t expected, uint64_t desired,
                             CompletionQueue* cq, uint64_t context) {
  start_atomic(peer, result, rk, remote_offset, true, expected, desired, cq, context);
}

void TcpFabric::start_atomic(int peer, uint64_t* result, const RemoteKey& rk, uint64_t offset,
                             bool compare_swap, uint64_t arg0, uint64_t arg1,
                             CompletionQueue* cq, uint64_t context) {
  OpRef op = start_one_sided(compare_swap ? OpType::kCompareSwap : OpType::kFetchAdd, peer, cq,
                             context, result, sizeof(uint64_t));
  if (!op) return;

  op->parts_left.store(1);
  Frame f;
  f.header.type = MessageType::kAtomic;
  f.header.flags = compare_swap ? kFlagCompareSwap : 0;
  f.header.id = op->id;
  f.header.tag = rk.key;
  f.header.word = offset;
  f.header.arg0 = arg0;
  f.header.arg1 = arg1;
  f.op = op;
  submit(peer, 0, std::move(f));
}

// --- target side (whoever reads the sockets, under rx_mu_) ---

void TcpFabric::reply(Stream& s, WireHeader h, const std::string& denial) {
  Frame f;
  if (!denial.empty()) {
    h.flags |= kFlagDenied;
    f.owned = "remote access denied by rank " + std::to_string(rank_) + ": " + denial;
    if (f.owned.size() > kMaxReasonBytes) f.owned.resize(kMaxReasonBytes);
  }
  h.length = f.owned.size();
  f.header = h;
  submit(s.peer(), s.index(), std::move(f));
}

Incoming TcpFabric::on_write(Stream&, const WireHeader& h) {
  Incoming in;
  RegionRef region = registry_->check(h.tag, h.word, h.length, AccessKind::kWrite, &in.denial);
  in.sink = region ? Sink::region(region->base() + h.word, h.length, region)
                   : Sink::discard(h.length);
  return in;
}

void TcpFabric::on_write_payload(Stream& s, const WireHeader& h, Incoming& in) {
  if (in.denial.empty() && in.sink.revoked())
    in.denial = "key " + format_key(h.tag) + " was deregistered while the write was landing";
  const bool ok = in.denial.empty();
  if (h.flags & kFlagImm) {
    if (h.length == h.arg0) {  // the whole write in one piece
      if (ok) deliver_imm(s.peer(), h.tag, h.arg1, h.arg0, h.imm);
    } else {
      auto& writes = peers_[s.peer()]->imm_writes;
      auto [it, fresh] = writes.try_emplace(h.id);
      if (fresh) it->second.remaining = h.arg0;
      it->second.remaining -= std::min(it->second.remaining, h.length);
      it->second.denied |= !ok;
      if (it->second.remaining == 0) {
        bool deliver = !it->second.denied;
        writes.erase(it);
        if (deliver) deliver_imm(s.peer(), h.tag, h.arg1, h.arg0, h.imm);
      }
    }
  }
  WireHeader ack;
  ack.type = MessageType::kWriteAck;
  ack.id = h.id;
  ack.arg0 = h.length;
  reply(s, ack, in.denial);
}

void TcpFabric::on_read_request(Stream& s, const WireHeader& h) {
  WireHeader resp;
  resp.type = MessageType::kReadResp;
  resp.id = h.id;
  resp.arg0 = h.arg0;
  std::string denial;
  RegionRef region = registry_->check(h.tag, h.word, h.arg1, AccessKind::kRead, &denial);
  if (!region) {
    reply(s, resp, denial);
    return;
  }
  Frame f;
  f.header = resp;
  f.header.length = h.arg1;
  f.payload = region->base() + h.word;
  f.if_revoked = "remote access denied by rank " + std::to_string(rank_) + ": key " +
                 format_key(h.tag) + " was deregistered before the read was served";
  f.region = std::move(region);
  submit(s.peer(), s.index(), std::move(f));
}

void TcpFabric::on_atomic(Stream& s, const WireHeader& h) {
  WireHeader resp;
  resp.type = MessageType::kAtomicResp;
  resp.id = h.id;
  std::string denial;
  if (RegionRef region =
          registry_->check(h.tag, h.word, sizeof(uint64_t), AccessKind::kAtomic, &denial)) {
    if (auto pin = region->pin()) {
      std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(region->base() + h.word));
      if (h.flags & kFlagCompareSwap) {
        uint64_t seen = h.arg0;
        word.compare_exchange_strong(seen, h.arg1);
        resp.arg0 = seen;  // the old value, whether or not it was swapped
      } else {
        resp.arg0 = word.fetch_add(h.arg0);
      }
    } else {
      denial = "key " + format_key(h.tag) + " was deregistered";
    }
  }
  reply(s, resp, denial);
}

// --- initiator side: replies (whoever reads the sockets, under rx_mu_) ---

Incoming TcpFabric::on_reply(Stream& s, const WireHeader& h) {
  Incoming in;
  const bool denied = h.flags & kFlagDenied;
  if (denied && h.length > kMaxReasonBytes) protocol_error(s, "oversized denial");
  OpRef op = ops_.find(h.id);
  if (!op || op->done()) {  // cancelled or failed meanwhile
    in.sink = Sink::discard(h.length);
    return in;
  }
  bool type_ok = false;
  switch (h.type) {
    case MessageType::kWriteAck: type_ok = op->type == OpType::kWrite; break;
    case MessageType::kReadResp: type_ok = op->type == OpType::kRead; break;
    default:
      type_ok = op->type == OpType::kFetchAdd || op->type == OpType::kCompareSwap;
  }
  if (!type_ok || op->peer.load() != s.peer())
    protocol_error(s, "reply for op " + std::to_string(h.id) + " of another kind or peer");
  in.op = op;
  if (denied) {
    in.sink = Sink::buffer(h.length);
  } else if (h.type == MessageType::kReadResp) {
    if (h.arg0 > op->length || h.length > op->length - h.arg0)
      protocol_error(s, "read response outside the read's buffer");
    in.sink = Sink::user(op->local + h.arg0, h.length, finished_flag(op), &user_memory_guard_);
  } else if (h.length != 0) {
    protocol_error(s, "payload on an acknowledgement");
  }
  return in;
}

void TcpFabric::on_reply_payload(const WireHeader& h, Incoming& in) {
  if (!in.op) return;
  Op& op = *in.op;
  if (h.flags & kFlagDenied) {
    if (!op.first_error) {
      const auto& text = in.sink.bytes();
      op.first_error = std::make_shared<const Error>(
          invalid_usage(std::string(text.begin(), text.end()), context_of(op)));
    }
  } else if (h.type == MessageType::kAtomicResp) {
    std::shared_lock lock(user_memory_guard_);
    if (!op.done()) std::memcpy(op.local, &h.arg0, sizeof h.arg0);
  }
  if (op.parts_left.fetch_sub(1) == 1) {
    if (op.first_error)
      fail(op, *op.first_error);
    else
      succeed(op);
  }
}

}  // namespace plait::transport::tcp
