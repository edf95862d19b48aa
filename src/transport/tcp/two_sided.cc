// Tagged send/recv over the TCP provider.
//
//   eager (len < threshold)   kEager header + payload on stream 0. Matched: the payload is
//                             received straight into the recv buffer. Unexpected: buffered,
//                             copied once when the recv is posted.
//   rendezvous (len >= it)    kRts on stream 0, matched like an eager header; the receiver
//                             answers kCts with its op id (or declines a truncated recv); the
//                             sender stripes kData pieces over all streams, each received
//                             straight into the recv buffer at its offset.
#include <cstring>

#include "transport/tcp/tcp_fabric.h"

namespace plait::transport::tcp {
namespace {

std::shared_ptr<const std::atomic<bool>> finished_flag(const OpRef& op) {
  return {op, &op->finished};  // shares the op's lifetime
}

}  // namespace

void TcpFabric::send(int peer, const void* buf, size_t len, uint64_t tag, uint64_t header,
                     CompletionQueue* cq, uint64_t context) {
  check_peer(peer, "send");
  PolicyCompletionQueue* q = checked_cq(cq, "send");
  if (!buf && len > 0) throw invalid_usage("null buffer", call_context(peer, "send", len));
  if (len < eager_threshold_ && send_eager_now(peer, buf, len, tag, header, q, context)) return;
  OpRef op = new_op(OpType::kSend, peer, q, context);
  op->local = const_cast<char*>(static_cast<const char*>(buf));
  op->length = len;
  op->tag = tag;
  op->header = header;
  if (!admit(op)) return;

  Frame f;
  f.op = op;
  f.header.tag = tag;
  f.header.word = header;
  if (len < eager_threshold_) {
    f.header.type = MessageType::kEager;
    f.header.length = len;
    f.payload = op->local;
    f.counts_for_op = true;
    op->parts_left.store(1);
  } else {
    f.header.type = MessageType::kRts;
    f.header.id = op->id;
    f.header.arg0 = len;
  }
  submit(peer, 0, std::move(f));
}

bool TcpFabric::send_eager_now(int peer, const void* buf, size_t len, uint64_t tag,
                               uint64_t header, PolicyCompletionQueue* q, uint64_t context) {
  // Without an op: the message is on the wire (or copied behind a full socket) before the
  // call returns, so there is nothing for a failure or cancel() to find. A failed peer's
  // send takes the op path, which fails it.
  if (peers_[peer]->failed.load(std::memory_order_relaxed)) return false;
  WireHeader h;
  h.type = MessageType::kEager;
  h.tag = tag;
  h.word = header;
  h.length = len;
  // From the write to the report, as submit() (cancel() waits for reports in flight).
  std::shared_lock guard(report_guard_);
  int error = 0;
  if (stream(peer, 0).write_now(h, static_cast<const char*>(buf), &error) ==
      Stream::DirectWrite::kNotNow) {
    if (error != 0) {  // this write broke the socket; the next socket reader fails the peer
      broken_stream_.store(true);
      wake_progress();
    }
    return false;
  }
  complete_now(q, OpType::kSend, peer, len, tag, context);
  return true;
}

void TcpFabric::recv(int peer, void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                     uint64_t context) {
  post_recv(peer, buf, capacity, tag, cq, context, nullptr);
}

void TcpFabric::recv_any_sibling(void* buf, size_t capacity, uint64_t tag, CompletionQueue* cq,
                                 uint64_t context, std::shared_ptr<std::atomic<bool>> sibling) {
  post_recv(kAnySource, buf, capacity, tag, cq, context, std::move(sibling));
}

void TcpFabric::post_recv(int peer, void* buf, size_t capacity, uint64_t tag,
                          CompletionQueue* cq, uint64_t context,
                          std::shared_ptr<std::atomic<bool>> sibling) {
  OpRef op = start_recv(peer, buf, capacity, tag, cq, context, std::move(sibling));
  match_recv(op, peer, matcher_, [&](const OpRef& recv, const Unexpected& m) {
    accept_rendezvous(recv, m.source, m.sender_op);
  });
}

void TcpFabric::accept_rendezvous(const OpRef& recv, int source, uint64_t sender_op) {
  Frame f;
  f.header.type = MessageType::kCts;
  f.header.id = sender_op;
  if (truncated(*recv, recv->message_length.load()) || recv->done()) {
    f.header.flags = kFlagDeclined;  // the sender completes without sending the payload
  } else {
    f.header.arg0 = recv->id;
    recv->remote_op = sender_op;  // named in its kDataAck
  }
  submit(source, 0, std::move(f));
}

// --- incoming two-sided messages (whoever reads the sockets, under rx_mu_) ---

Incoming TcpFabric::on_eager(Stream& s, const WireHeader& h) {
  Matcher::Arrival a = matcher_.arrive(s.peer(), h.tag, h.word, h.length, false, 0);
  // Before anything is allocated for it: the length is the peer's word.
  if (a.over_limit)
    protocol_error(s, unexpected_limit_error(s.peer(), h.length, a.usage, matcher_.limits()));
  Incoming in;
  if (a.recv) {
    in.op = a.recv;
    in.sink = truncated(*a.recv, h.length)
                  ? Sink::discard(h.length)
                  : Sink::user(a.recv->local, h.length, finished_flag(a.recv), &user_memory_guard_);
  } else {
    // Only this thread touches `data` until the entry is marked complete.
    a.unexpected->data.resize(h.length);
    in.sink = Sink::owned(a.unexpected->data.data(), h.length);
    in.unexpected = std::move(a.unexpected);
  }
  return in;
}

void TcpFabric::on_eager_payload(Stream&, const WireHeader&, Incoming& in) {
  if (in.op) {
    succeed(*in.op);  // no-op if it was truncated or cancelled meanwhile
    return;
  }
  if (OpRef claimer = matcher_.payload_complete(in.unexpected))
    deliver_buffered(*claimer, *in.unexpected);
}

void TcpFabric::on_rts(Stream& s, const WireHeader& h) {
  Matcher::Arrival a = matcher_.arrive(s.peer(), h.tag, h.word, h.arg0, true, h.id);
  if (a.over_limit)
    protocol_error(s, unexpected_limit_error(s.peer(), h.arg0, a.usage, matcher_.limits()));
  if (a.recv) accept_rendezvous(a.recv, s.peer(), h.id);
}

void TcpFabric::on_cts(Stream& s, const WireHeader& h) {
  OpRef op = ops_.find(h.id);
  if (!op || op->done()) return;  // cancelled or failed meanwhile
  if (op->type != OpType::kSend || op->peer.load() != s.peer())
    protocol_error(s, "clear-to-send for op " + std::to_string(h.id) + ", not a send to it");
  if (h.flags & kFlagDeclined) {
    succeed(*op);  // the receiver reported the truncation on its side
    return;
  }
  // Complete on the receiver's kDataAck, not on the last write: until then the stripes can
  // be sent again if a stream breaks (stream_loss.cc).
  op->remote_op = h.arg0;
  send_stripes(op, s.peer());
}

Incoming TcpFabric::on_data(Stream& s, const WireHeader& h) {
  Incoming in;
  OpRef op = ops_.find(h.id);
  if (!op || op->done()) {  // cancelled or failed: the bytes still have to be read
    in.sink = Sink::discard(h.length);
    return in;
  }
  uint64_t length = op->message_length.load();
  if (op->type != OpType::kRecv || op->peer.load() != s.peer() || h.word > length ||
      h.length > length - h.word)
    protocol_error(s, "data piece at offset " + std::to_string(h.word) + " + " +
                          std::to_string(h.length) + " does not belong to op " +
                          std::to_string(h.id));
  in.op = op;
  in.sink = Sink::user(op->local + h.word, h.length, finished_flag(op), &user_memory_guard_);
  return in;
}

void TcpFabric::on_data_payload(Incoming& in, const WireHeader& h) {
  if (!in.op) return;
  Op& op = *in.op;
  // A stripe sent again after a stream broke rewrote the same bytes: it counts once.
  if (!op.stripes_in) op.stripes_in = std::make_unique<std::unordered_set<uint64_t>>();
  if (!op.stripes_in->insert(h.word).second) return;
  op.received += h.length;
  if (op.received != op.message_length.load()) return;
  const int sender = op.peer.load();
  const uint64_t sender_op = op.remote_op;
  succeed(op);
  Frame ack;
  ack.header.type = MessageType::kDataAck;
  ack.header.id = sender_op;
  submit(sender, 0, std::move(ack));
}

}  // namespace plait::transport::tcp
