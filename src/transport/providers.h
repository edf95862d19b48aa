// The providers built into plait, and the choice among them: the one place in the transport
// layer that knows every provider (the Fabric interface, fabric.h, knows none).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "transport/fabric.h"

namespace plait::transport {

// Where every rank of a job is and which provider reaches it.
struct FabricTopology {
  std::vector<std::string> host;  // per fabric rank: its host identity (host_identity.h)
  std::vector<int> host_of;       // per fabric rank: host index, 0 = rank 0's host
  // Per fabric rank: index of the machine whose cores it shares (machine_identity()); the
  // same as host_of but where hosts are simulated or namespaces of one machine.
  std::vector<int> machine_of;
  std::vector<std::string> provider;  // per fabric rank: "shm", "tcp", or "self"
  CostModel intra;  // the provider within this host (shm unless PLAIT_TRANSPORT=tcp)
  CostModel inter;  // the provider across hosts (tcp)
  int hosts() const;
};

// The fabric for a job (see composite_fabric.h): every rank publishes its host identity in
// options.store, then peers on this host are served by shm and the others by tcp, or all by
// the provider PLAIT_TRANSPORT names. Fills *topology when given. Throws like the providers'
// factories, and kInvalidUsage when PLAIT_TRANSPORT=shm but a rank is on another host.
std::unique_ptr<Fabric> create_fabric(const FabricOptions& options,
                                      FabricTopology* topology = nullptr);

// The providers built into this binary and what they can do, for `plait info`.
std::vector<Capabilities> provider_capabilities(const Config& config);

}  // namespace plait::transport
