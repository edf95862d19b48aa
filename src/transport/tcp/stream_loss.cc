// One stream of several breaks (a reset by a middlebox, a socket killed), while the peer
// and its stream 0 live on: the transfer goes on over the other streams instead of failing
// the peer.
//
// What makes that possible: stripes of a rendezvous message may arrive twice (the receiver
// counts each offset once) and a rendezvous send completes only when the receiver says
// every stripe is in (kDataAck), so its memory stays readable for a resend until then.
// Both sides stop using the broken stream; the side that noticed tells the other
// (kStreamLost), since a half-open socket may break on one side only. One-sided operations
// with the peer fail as operations (their pieces and replies are not kept for a resend).
// Eager messages and every header travel on stream 0, whose loss fails the peer as before.
#include <bit>
#include <sys/socket.h>

#include "core/log.h"
#include "transport/tcp/tcp_fabric.h"

namespace plait::transport::tcp {

int TcpFabric::live_stream_count(int peer) const {
  return streams_ - std::popcount(peers_[peer]->dead_streams.load(std::memory_order_acquire));
}

int TcpFabric::live_stream(int peer, size_t i) const {
  const uint64_t dead = peers_[peer]->dead_streams.load(std::memory_order_acquire);
  if (dead == 0) return static_cast<int>(i % static_cast<size_t>(streams_));
  size_t k = i % static_cast<size_t>(streams_ - std::popcount(dead));
  for (int s = 0; s < streams_; ++s)
    if (!(dead & (uint64_t{1} << s)) && k-- == 0) return s;
  return 0;
}

void TcpFabric::send_stripes(const OpRef& op, int peer) {
  const size_t n = pieces(op->length);
  for (size_t i = 0; i < n; ++i) {
    const size_t offset = i * stripe_bytes_;
    Frame f;
    f.header.type = MessageType::kData;
    f.header.id = op->remote_op;
    f.header.word = offset;
    f.header.length = std::min(stripe_bytes_, op->length - offset);
    f.payload = op->local + offset;
    f.op = op;  // read while the send lasts: until the receiver's kDataAck
    submit(peer, live_stream(peer, i), std::move(f));
  }
}

bool TcpFabric::lose_stream(Stream& s, const std::string& why) {
  const int peer = s.peer();
  Peer& p = *peers_[peer];
  if (s.index() == 0 || !p.streams[0]->receiving || p.failed.load()) return false;
  const uint64_t bit = uint64_t{1} << s.index();
  if (p.dead_streams.fetch_or(bit, std::memory_order_acq_rel) & bit) return true;
  if (s.receiving) close_stream(s);
  log(LogLevel::kWarn, "rank ", rank_, ": tcp fabric '", name_, "': ", why,
      "; its transfers go on over the other ", live_stream_count(peer), " stream(s) to rank ",
      peer);
  Frame lost;
  lost.header.type = MessageType::kStreamLost;
  lost.header.arg0 = static_cast<uint64_t>(s.index());
  submit(peer, 0, std::move(lost));
  // Rendezvous sends in their data phase: all their stripes again (which of them the
  // receiver has is not known here; it counts each once).
  for (const OpRef& op : ops_.select([&](const Op& o) {
         return o.type == OpType::kSend && o.peer.load() == peer && o.remote_op != 0;
       }))
    if (!op->done()) send_stripes(op, peer);
  std::vector<OpRef> one_sided = ops_.select([&](const Op& o) {
    return o.peer.load() == peer && o.type != OpType::kSend && o.type != OpType::kRecv;
  });
  fail_all(one_sided, "stream " + std::to_string(s.index()) + " to rank " +
                          std::to_string(peer) + " broke while the operation used it (" +
                          why + ")");
  return true;
}

void TcpFabric::on_data_ack(Stream& s, const WireHeader& h) {
  OpRef op = ops_.find(h.id);
  if (!op || op->done()) return;  // cancelled or failed meanwhile
  if (op->type != OpType::kSend || op->peer.load() != s.peer())
    protocol_error(s, "data acknowledgement for op " + std::to_string(h.id) + ", not a send to it");
  succeed(*op);  // declined too: the receiver reported the cancellation on its side
}

void TcpFabric::on_stream_lost(Stream& s, const WireHeader& h) {
  if (h.arg0 == 0 || h.arg0 >= static_cast<uint64_t>(streams_))
    protocol_error(s, "lost stream " + std::to_string(h.arg0) + " is not a stream it may lose");
  Stream& lost = stream(s.peer(), static_cast<int>(h.arg0));
  lose_stream(lost, "rank " + std::to_string(s.peer()) + " reports stream " +
                        std::to_string(h.arg0) + " broken");
}

void TcpFabric::break_stream_for_test(int peer, int index) {
  ::shutdown(stream(peer, index).fd(), SHUT_RDWR);
}

}  // namespace plait::transport::tcp
