// The UCX provider's entry points.
#pragma once

#include <memory>

#include "transport/fabric.h"

namespace plait::transport {

// The UCX provider (see src/transport/ucx/): every rank in options.peers (default: every
// other rank) over UCP, on whatever transports UCX finds (PLAIT_UCX_TLS / UCX_TLS restrict
// them). Same contract as create_tcp_fabric (tcp/tcp_provider.h).
std::unique_ptr<Fabric> create_ucx_fabric(const FabricOptions& options);

Capabilities ucx_capabilities();

}  // namespace plait::transport
