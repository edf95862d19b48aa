#include "transport/job_fabric.h"

namespace plait::transport {

void check_bootstrap(const Bootstrap& bootstrap) {
  if (bootstrap.size < 1 || bootstrap.rank < 0 || bootstrap.rank >= bootstrap.size)
    throw invalid_usage("bad bootstrap: rank " + std::to_string(bootstrap.rank) + " of size " +
                        std::to_string(bootstrap.size));
  if (!bootstrap.store) throw invalid_usage("bootstrap has no store");
}

JobFabric create_job_fabric(const Bootstrap& bootstrap, const std::string& scope,
                            const Config& config) {
  // Several objects of one name may be created over one store: number the instances so that
  // each gets its own keys. Creation is collective and blocks until every rank has joined,
  // so every rank's n-th instance gets the same number.
  const int64_t ticket = bootstrap.store->add(scope + "/instances", 1);
  JobFabric job;
  // The rank that hosts the store (torchrun's way: rank 0 at MASTER_ADDR) serves it for as
  // long as this job's objects use it: a split or a shrink long after the Bootstrap went
  // still needs it, and the other ranks' requests with it.
  std::shared_ptr<Store> base = bootstrap.store;
  if (bootstrap.store_server)
    base = std::shared_ptr<Store>(base.get(), [base, server = bootstrap.store_server](Store*) {});
  job.store = std::make_shared<PrefixStore>(
      scope + "/" + std::to_string((ticket - 1) / bootstrap.size), std::move(base));
  FabricOptions options{.rank = bootstrap.rank,
                        .size = bootstrap.size,
                        .store = job.store,
                        .name = "fabric",
                        .job_token = bootstrap.job_token,
                        .route_hint = bootstrap.store_host,
                        .config = config};
  job.topology = std::make_shared<FabricTopology>();
  job.fabric = create_fabric(options, job.topology.get());
  return job;
}

}  // namespace plait::transport
