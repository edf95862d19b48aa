// Setup of the shm provider: each rank creates its segment, publishes its name in the store,
// maps every peer's segment and checks that it belongs to this job (token tag, rank, size),
// probes cross-memory attach against each peer, and meets them at a barrier in the store.
// Past the barrier every peer has mapped our segment, so it is unlinked right away (and a
// peer's segment too, when that peer serves the same group of ranks: whoever passes the
// barrier first unlinks them all): from then on a crash of any rank leaves nothing in
// /dev/shm.
//
// A crash during setup: each rank unlinks its own segment on any setup error, and the
// segments of peers found dead; setup also sweeps /dev/shm for plait segments whose creator
// has exited (segment.h).
#pragma once

#include <sys/types.h>

#include <vector>

#include "core/shared_memory.h"
#include "core/socket.h"
#include "transport/fabric.h"
#include "transport/shm/cma.h"
#include "transport/shm/segment.h"

namespace plait::transport::shm {

struct PeerLink {
  int rank = -1;
  pid_t pid = 0;
  SharedMemory segment;        // the peer's segment: our inbox ring there, its table and header
  Geometry geometry;      // its layout, as verified at setup (the header's may change since)
  uint32_t my_index = 0;  // our index in the peer's peer list (our ring and pins there)
  net::Fd pidfd;          // readable once the peer process has exited
  bool cma = false;       // cross-memory attach works both ways between us
  SegmentView view() const { return SegmentView(segment.base(), geometry); }
};

struct Attachment {
  SharedMemory own;
  Geometry own_geometry;
  CmaPermission cma_permission;  // held while some pair uses cross-memory attach
  std::vector<PeerLink> peers;  // in the order of `peer_ranks` (our rings and pins)
  SegmentView own_view() const { return SegmentView(own.base(), own_geometry); }
};

// Whether the peer's process has exited (its pidfd is readable); one poll(2).
bool peer_exited(const PeerLink& peer);

// Blocks until every peer is attached or options.config.connect_timeout passes. Throws
// plait::Error: kTimeout naming the ranks that never showed up, kInvalidUsage for a peer
// with another job token or an inconsistent job, kRemote for a peer that died during setup,
// kSystem for OS failures and for PLAIT_SHM_CMA=on where cross-memory attach does not work.
Attachment attach(const FabricOptions& options, const std::vector<int>& peer_ranks,
                  const Geometry& geometry);

}  // namespace plait::transport::shm
