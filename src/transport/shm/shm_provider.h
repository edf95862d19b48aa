// The shm provider's entry points.
#pragma once

#include <memory>

#include "core/config.h"
#include "transport/fabric.h"

namespace plait::transport {

// The shared-memory provider for ranks on this host (see src/transport/shm/). Same contract
// as create_tcp_fabric (tcp/tcp_provider.h); every rank in options.peers must be on this host.
std::unique_ptr<Fabric> create_shm_fabric(const FabricOptions& options);

Capabilities shm_capabilities(const Config& config);

}  // namespace plait::transport
