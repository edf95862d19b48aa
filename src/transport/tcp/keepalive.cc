// Keep-alives: a peer that is stopped (SIGSTOP, a debugger, swap), whose host lost its link,
// or whose traffic a switch drops says nothing, and TCP says nothing either for many
// minutes: no RST, no FIN. Each rank therefore sends a 56-byte kKeepAlive on stream 0 to
// every peer it had nothing else queued for, once per PLAIT_KEEPALIVE, and fails a peer from
// which no byte at all arrived for the peer timeout, with or without an operation pending.
//
// The progress thread does it between its other work; the data path pays nothing beyond
// counting the bytes each recv returned (Stream::received_bytes). Silence is judged only on
// time this process was running itself: after a gap much longer than the period (this rank
// was stopped, or starved of CPU) every peer gets a fresh start.
#include <cstdio>
#include <vector>

#include "core/socket.h"
#include "transport/tcp/tcp_fabric.h"

namespace plait::transport::tcp {

void TcpFabric::keepalive_tick(Clock::time_point now) {
  const bool we_were_away = now - last_keepalive_ > 3 * keepalive_;
  last_keepalive_ = now;
  next_keepalive_ = now + keepalive_;
  std::vector<int> quiet;  // peers that get a keep-alive: sent outside the rx lock
  std::unique_lock rx(rx_mu_);
  for (auto& peer : peers_) {
    if (!peer || peer->failed.load(std::memory_order_relaxed)) continue;
    uint64_t received = 0;
    for (auto& s : peer->streams) received += s->received_bytes();
    if (received != peer->heard_bytes || we_were_away) {
      peer->heard_bytes = received;
      peer->heard_at = now;
    } else if (now - peer->heard_at >= peer_timeout_) {
      Stream& s0 = *peer->streams[0];
      const double silent = std::chrono::duration<double>(now - peer->heard_at).count();
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.1f", silent);
      const std::string why = "rank " + std::to_string(s0.peer()) + " at " +
                              net::peer_address(s0.fd()) + " sent nothing for " + seconds +
                              " s, not even a keep-alive (PLAIT_PEER_TIMEOUT=" +
                              std::to_string(peer_timeout_.count()) +
                              " ms): it is stopped, hung, or its host is unreachable";
      fail_peer(s0.peer(), why, false);
      continue;
    }
    // Frames already queued say as much as a keep-alive would.
    if (peer->streams[0]->idle()) quiet.push_back(peer->streams[0]->peer());
  }
  rx.unlock();
  for (int p : quiet) {
    Frame keepalive;
    keepalive.header.type = MessageType::kKeepAlive;
    submit(p, 0, std::move(keepalive));
  }
}

}  // namespace plait::transport::tcp
