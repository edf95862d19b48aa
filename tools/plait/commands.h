// The subcommands of the `plait` tool; main.cc dispatches argv[1] to one of them.
#pragma once

#include <string>
#include <vector>

namespace plait::cli {

int run_main(int argc, char** argv);    // plait run -n N [--] cmd args...
int bench_main(int argc, char** argv);  // plait bench [-n N] <op> [options]
int info_main(int argc, char** argv);   // plait info
int tune_main(int argc, char** argv);   // plait tune [-n N] [--providers ...] [--out F]
int sim_main(int argc, char** argv);    // plait sim OP ... | plait sim topo [SPEC ...]
int sort_main(int argc, char** argv);   // plait sort gen|run|validate ...

// Starts `nranks` copies of `command` on this host with an embedded store, the torchrun-style
// environment and plait's own; prefixes output lines by rank; forwards SIGINT/SIGTERM; stops
// the others when one fails. Returns the job's exit status (0 when every rank exited 0).
int launch_local_job(int nranks, const std::vector<std::string>& command);

}  // namespace plait::cli
