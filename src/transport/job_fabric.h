// The fabric of one object of a job (a communicator, an rdma::Fabric, a parameter server),
// made the same way for all of them: its own store scope, numbered per name so that every
// rank's n-th object of a name meets the same keys, and the transport over it.
#pragma once

#include <memory>
#include <string>

#include "core/config.h"
#include "plait/bootstrap.h"
#include "plait/store.h"
#include "transport/fabric.h"
#include "transport/providers.h"

namespace plait::transport {

// Throws Error(kInvalidUsage) for a rank outside the job or a bootstrap without a store.
void check_bootstrap(const Bootstrap& bootstrap);

struct JobFabric {
  std::unique_ptr<Fabric> fabric;
  std::shared_ptr<FabricTopology> topology;
  std::shared_ptr<Store> store;  // the object's scope of the job's store
};

// Collective over the bootstrap's ranks: `scope` + "/" + the instance number prefixes every
// key of the object. Throws like create_fabric().
JobFabric create_job_fabric(const Bootstrap& bootstrap, const std::string& scope,
                            const Config& config);

}  // namespace plait::transport
