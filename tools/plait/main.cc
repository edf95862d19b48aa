// The `plait` command: dispatches the word after `plait` to its subcommand, which gets the
// arguments after that word.
#include <cstdio>
#include <string_view>

#include "plait/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: plait <command> [args]\n"
    "  run -n N [--] cmd args...   start N ranks of cmd on this host (embedded store)\n"
    "  bench [-n N] <op> [opts]    time a collective over a size sweep (nccl-tests style);\n"
    "                              plait bench --help for the operations and options\n"
    "  tune [-n N] [opts]          measure latency/bandwidth per provider for the cost\n"
    "                              model; plait tune --help for the options\n"
    "  sim OP --topology SPEC ...  replay a collective's schedules on a modelled network;\n"
    "  sim topo [SPEC ...]         topology facts (diameter, bisection, cost); plait sim --help\n"
    "  sort gen|run|validate ...   the sort benchmark: gensort's records, a distributed\n"
    "                              sort over the shuffle, valsort's checks; plait sort --help\n"
    "  info                        version, providers, algorithms, PLAIT_* settings\n"
    "  help                        this summary\n"
    "  --version                   the version\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string_view command = argv[1];
  if (command == "--version" || command == "version") {
    std::printf("plait %s\n", PLAIT_VERSION);
    return 0;
  }
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "run") return plait::cli::run_main(argc - 2, argv + 2);
  if (command == "bench") return plait::cli::bench_main(argc - 2, argv + 2);
  if (command == "info") return plait::cli::info_main(argc - 2, argv + 2);
  if (command == "tune") return plait::cli::tune_main(argc - 2, argv + 2);
  if (command == "sim") return plait::cli::sim_main(argc - 2, argv + 2);
  if (command == "sort") return plait::cli::sort_main(argc - 2, argv + 2);
  std::fprintf(stderr, "plait: unknown command '%s'\n%s", argv[1], kUsage);
  return 2;
}
