// Connection setup of the TCP provider: listen, publish our address in the store, connect
// the mesh of FabricOptions::peers (the lower rank connects to the higher one, `tcp_streams` sockets per pair),
// authenticate every socket with the job token and exchange hellos.
#pragma once

#include <vector>

#include "core/auth.h"
#include "core/socket.h"
#include "transport/fabric.h"

namespace plait::transport::tcp {

// sockets[peer][stream]: blocking, authenticated, TCP_NODELAY; empty for our own rank and
// for ranks outside FabricOptions::peers (another provider serves those).
struct Mesh {
  std::vector<std::vector<net::Fd>> sockets;
  // nonces[peer][stream]: the socket's handshake nonce (PLAIT_TCP_INTEGRITY keys derive from
  // it); the lower rank of a pair is the one that connected.
  std::vector<std::vector<auth::Nonce>> nonces;
  bool member(int r) const { return !sockets[r].empty(); }
};

// Blocks until every socket is up or options.config.connect_timeout passes. Throws
// plait::Error: kTimeout naming the ranks that never published or never connected,
// kInvalidUsage when a peer rejects our job token, kRemote / kSystem for other failures.
Mesh connect_mesh(const FabricOptions& options);

}  // namespace plait::transport::tcp
