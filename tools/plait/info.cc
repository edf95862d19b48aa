// `plait info`: what this build of plait is and how it is configured right now, like
// ucc_info / fi_info: the version, the transport providers and what each can do, the
// collectives and their algorithms, and every PLAIT_* setting with its current value.
#include <algorithm>
#include <cstdio>
#include <string>

#include "coll/algorithms.h"
#include "commands.h"
#include "core/config.h"
#include "plait/error.h"
#include "transport/fabric.h"

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
  if (argc > 0) {
    const std::string arg = argv[0];
    if (arg == "-h" || arg == "--help") {
      std::printf("usage: plait info\n"
                  "Prints the version, providers, algorithms and PLAIT_* settings.\n");
      return 0;
    }
    std::fprintf(stderr, "plait info: unexpected argument '%s'\n", argv[0]);
    return 2;
  }
  try {
    const Config config = Config::from_env();
    std::printf("plait %s\n", PLAIT_VERSION);
    print_providers(config);
    print_algorithms();
    print_settings(config);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "plait info: %s\n", e.what());
    return e.category() == ErrorCategory::kInvalidUsage ? 2 : 1;
  }
}

}  // namespace plait::cli
