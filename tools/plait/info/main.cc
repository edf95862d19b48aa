// `plait info`: what this build of plait is and how it is configured right now, like
// ucc_info / fi_info: the version, the transport providers and what each can do, the
// collectives and their algorithms, and every PLAIT_* setting with its current value.
#include <algorithm>
#include <cstdio>
#include <string>

#include "coll/select/algorithms.h"
#include "core/config.h"
#include "plait/bootstrap.h"
#include "plait/commands.h"
#include "plait/error.h"
#include "plait/store.h"
#include "transport/fabric.h"
#include "transport/host_identity.h"
#include "transport/providers.h"
#include "transport/tuned_costs.h"
#include "transport/ucx/ucx_info.h"
#include "transport/ucx/ucx_settings.h"

namespace plait::cli {
namespace {

void print_providers(const Config& config) {
  std::printf("\nProviders:\n");
  for (const transport::Capabilities& c : transport::provider_capabilities(config)) {
    std::string features;
    auto add = [&](bool on, const char* name) {
      if (!on) return;
      if (!features.empty()) features += ' ';
      features += name;
    };
    add(c.tagged, "tagged");
    add(c.rma, "rma");
    add(c.write_imm, "write_imm");
    add(c.atomics, "atomics");
    add(c.any_source, "any_source");
    std::printf("  %-6s %s; %d stream%s per peer\n", c.provider.c_str(), features.c_str(),
                c.streams_per_peer, c.streams_per_peer == 1 ? "" : "s");
  }
  const transport::ucx::UcxInfo ucx = transport::ucx::ucx_info(config);
  if (ucx.version.empty()) {
    std::printf("  ucx: UCX could not start here: %s\n", ucx.error.c_str());
  } else {
    std::printf("  ucx: UCX %s, transports/devices%s: %s\n", ucx.version.c_str(),
                config.get<transport::UcxSettings>().tls.empty() ? "" : (" (PLAIT_UCX_TLS=" + config.get<transport::UcxSettings>().tls + ")").c_str(),
                ucx.resource_list().c_str());
    std::printf("       RDMA NIC: %s\n", ucx.rdma() ? "yes" : "none (rc, dc, ud absent)");
  }
}

void print_selection(const Config& config) {
  std::printf("\nProvider selection (PLAIT_TRANSPORT=%s):\n", config.transport.c_str());
  std::printf("  this host: %s\n", transport::host_identity(config).c_str());
  if (config.transport == "auto") {
    const bool rdma = transport::ucx::ucx_info(config).rdma();
    std::printf("  ranks with the same host identity use shm; the others ucx where both hosts "
                "have an RDMA NIC, else tcp (this host: %s)\n",
                rdma ? "has one, ucx to such hosts" : "has none, tcp");
  } else if (config.transport == "shm+ucx") {
    std::printf("  ranks with the same host identity use shm, the others ucx\n");
  } else
    std::printf("  every peer uses %s\n", config.transport.c_str());
  std::printf("  (run `plait run -n N plait info --job` to see a job's choice per rank)\n");
}

// Where the measured cost constants come from; a bad file is reported, not fatal here.
void print_tuning(const Config& config) {
  std::printf("\nCost model tuning (written by `plait tune`):\n");
  const std::string path = transport::tune_file_path(config);
  if (path.empty()) {
    std::printf("  tune file: none (PLAIT_TUNE_FILE, XDG_CACHE_HOME and HOME are unset); "
                "built-in defaults\n");
    return;
  }
  try {
    const transport::TunedCosts costs = transport::load_tuned_costs_file(path);
    if (!costs.found) {
      std::printf("  tune file: %s (not found: built-in defaults; run `plait tune`)\n",
                  path.c_str());
      return;
    }
    std::printf("  tune file: %s (found, %zu value%s)\n", path.c_str(), costs.values().size(),
                costs.values().size() == 1 ? "" : "s");
    for (const auto& [key, value] : costs.values())
      std::printf("    %s = %g\n", key.c_str(), value);
  } catch (const Error& e) {
    std::printf("  tune file: %s (unusable, jobs will fail until it is fixed or deleted: %s)\n",
                path.c_str(), e.message().c_str());
  }
}

// Inside a job: set up the fabric for real and let rank 0 print what each rank got.
int print_job(const Config& config) {
  Bootstrap b = bootstrap_from_env(config.connect_timeout);
  auto store = std::make_shared<PrefixStore>("plait-info", b.store);
  transport::FabricTopology topo;
  auto fabric = transport::create_fabric({.rank = b.rank,
                                          .size = b.size,
                                          .store = store,
                                          .name = "fabric",
                                          .job_token = b.job_token,
                                          .route_hint = b.store_host,
                                          .config = config},
                                         &topo);
  // Every rank's view, gathered through the store, so rank 0 shows what each rank chose.
  std::string mine;
  for (int r = 0; r < b.size; ++r) mine += (r ? " " : "") + topo.provider[r];
  store->set("view/" + std::to_string(b.rank), mine);
  if (b.rank == 0) {
    const int machines =
        topo.machine_of.empty() ? 1 : *std::max_element(topo.machine_of.begin(), topo.machine_of.end()) + 1;
    // Hosts simulated with PLAIT_HOST_ID, or network namespaces, share one machine's cores.
    std::printf("%d rank(s) on %d host(s), %d machine(s); fabric: %s\n", b.size, topo.hosts(),
                machines, fabric->capabilities().provider.c_str());
    std::printf("  %-5s %-5s %-60s %s\n", "rank", "host", "identity", "provider to rank 0..n-1");
    for (int r = 0; r < b.size; ++r) {
      std::string view = store->get_string("view/" + std::to_string(r), config.connect_timeout);
      std::printf("  %-5d %-5d %-60s %s\n", r, topo.host_of[r], topo.host[r].c_str(), view.c_str());
    }
    std::fflush(stdout);
  }
  // Nobody tears its fabric down before rank 0 has printed (peers would see it vanish).
  store->set("done/" + std::to_string(b.rank), "1");
  std::vector<std::string> done;
  for (int r = 0; r < b.size; ++r) done.push_back("done/" + std::to_string(r));
  store->wait(done, config.connect_timeout);
  return 0;
}

void print_algorithms() {
  std::printf("\nCollectives and algorithms (auto: chosen by the cost model):\n");
  for (coll::CollOp op : {coll::CollOp::kAllreduce, coll::CollOp::kReduce,
                          coll::CollOp::kBroadcast, coll::CollOp::kAllgather,
                          coll::CollOp::kAllgatherv, coll::CollOp::kReduceScatter,
                          coll::CollOp::kReduceScatterv, coll::CollOp::kAlltoall,
                          coll::CollOp::kAlltoallv, coll::CollOp::kGather,
                          coll::CollOp::kScatter, coll::CollOp::kBarrier}) {
    std::string names;
    for (coll::Algorithm algorithm : coll::algorithms_for(op)) {
      if (!names.empty()) names += ' ';
      names += to_string(algorithm);
    }
    std::printf("  %-16s %s\n", std::string(to_string(op)).c_str(),
                names.empty() ? "-" : names.c_str());
  }
}

void print_settings(const Config& config) {
  size_t width = 0;
  for (const SettingInfo& s : settings()) width = std::max(width, s.name.size());
  std::printf("\nSettings (environment; value now, default, type):\n");
  for (const SettingInfo& s : settings()) {
    const std::string value = setting_value(config, s.name);
    std::printf("  %-*s = %s  (default %s; %s)\n      %s\n", static_cast<int>(width),
                s.name.c_str(), value.empty() ? "\"\"" : value.c_str(),
                s.default_value.empty() ? "\"\"" : s.default_value.c_str(), s.type.c_str(),
                s.doc.c_str());
  }
}

}  // namespace

int info_main(int argc, char** argv) {
  bool job = false;
  if (argc > 0) {
    const std::string arg = argv[0];
    if (arg == "-h" || arg == "--help") {
      std::printf("usage: plait info [--job]\n"
                  "Prints the version, providers, algorithms and PLAIT_* settings.\n"
                  "--job: inside a job (plait run, torchrun, mpirun), sets up the fabric and\n"
                  "       prints each rank's host and the provider it uses to every peer.\n");
      return 0;
    }
    if (arg == "--job" && argc == 1) job = true;
  }
  if (argc > 0 && !job) {
    std::fprintf(stderr, "plait info: unexpected argument '%s'\n", argv[0]);
    return 2;
  }
  try {
    const Config config = Config::from_env();
    if (job) return print_job(config);
    std::printf("plait %s\n", PLAIT_VERSION);
    print_providers(config);
    print_selection(config);
    print_tuning(config);
    print_algorithms();
    print_settings(config);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "plait info: %s\n", e.what());
    return e.category() == ErrorCategory::kInvalidUsage ? 2 : 1;
  }
}

}  // namespace plait::cli
