// Connection setup of the TCP provider: listen, publish our address in the store, connect
// the mesh of FabricOptions::peers (the lower rank connects to the higher one, `tcp_streams` sockets per pair),
// authenticate every socket with the job token and exchange hellos.
#pragma once

#include <vector>

#include "core/socket.h"
#include "transport/fabric.h"

namespace plait::transport::tcp {

// sockets[peer][stream]: blocking, authenticated, TCP_NODELAY; empty for our own rank and
// for ranks outside FabricOptions::peers (another provider serves those).
struct Mesh {
  std::vector<std::vector<net::Fd>> sockets;
  bool member(int r) const { return !sockets[r].empty(); }
};

// Blocks until every socket is up or options.config.connect_timeout passes. Throws
// plait::Error: kTimeout naming the ranks that never published or never connected,
// kInvalidUsage when a peer rejects our job token, kRemote / kSystem for other failures.
Mesh connect_mesh(const FabricOptions& options);

}  // namespace plait::transport::tcp
