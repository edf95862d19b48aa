// The TCP provider's entry points.
#pragma once

#include <memory>

#include "core/config.h"
#include "transport/fabric.h"

namespace plait::transport {

// Creates the fabric for a job: listens, publishes its address in the store, connects to
// every peer (each connection authenticated with the job token) and starts the progress
// thread. Throws plait::Error (kTimeout naming the ranks that never showed up, kRemote,
// kSystem, or kInvalidUsage for a wrong job token) within options.config.connect_timeout.
std::unique_ptr<Fabric> create_tcp_fabric(const FabricOptions& options);

Capabilities tcp_capabilities(const Config& config);

}  // namespace plait::transport
