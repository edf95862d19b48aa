// Which ranks share a host, for provider selection (shm between them, tcp otherwise) and for
// the hierarchical collectives.
//
// Two processes can use the shm provider when they see the same kernel (boot id), the same
// network namespace (the convention of NCCL and Open MPI: another namespace is another
// "host", like a container on the same machine) and the same PID namespace (cross-memory
// attach addresses the peer by pid). PLAIT_HOST_ID replaces the whole identity, so tests and
// users can simulate several hosts on one machine.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace plait::transport {

// "boot:<boot id>/net:<inode>/pid:<inode>", or "id:<PLAIT_HOST_ID>" when set.
std::string host_identity(const Config& config);
// The machine whose cores a process runs on: its boot id, whatever PLAIT_HOST_ID or the
// namespaces say (simulated hosts and containers of one machine share its cores).
std::string machine_identity();

// Numbers the distinct identities 0, 1, ... in order of first appearance (so the host of
// rank 0 is host 0); returns one index per rank.
std::vector<int> host_indices(const std::vector<std::string>& identities);

}  // namespace plait::transport
