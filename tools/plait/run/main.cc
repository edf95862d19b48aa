// `plait run`: the command line of the local launcher; the work is in local_job.cc.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plait/commands.h"
#include "plait/error.h"
#include "plait/run/local_job.h"

namespace plait::cli {
namespace {

constexpr const char* kUsage =
    R"(usage: plait run -n N [--timeout SECONDS] [--grace SECONDS] [--bind auto|core|none]
                 [--max-restarts K] [--enable-recovery] [--] command [args...]

Starts N ranks of `command` on this host with an embedded rendezvous store. Each rank gets
torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR, MASTER_PORT) and plait's (PLAIT_RANK, PLAIT_WORLD_SIZE, PLAIT_LOCAL_RANK,
PLAIT_LOCAL_SIZE, PLAIT_STORE_ADDR, PLAIT_JOB_TOKEN). Output lines are prefixed with the
rank, "[2] text". SIGINT, SIGTERM and SIGHUP are passed on to the ranks; when a rank fails, the
others are stopped.

options:
  -n, --nproc N        number of ranks (also --nproc-per-node N)
  --timeout SECONDS    stop the job when it runs longer than this (exit status 124)
  --grace SECONDS      time between SIGTERM and SIGKILL when stopping ranks
                       (default 3, or PLAIT_RUN_GRACE_S)
  --bind MODE          none (default, or PLAIT_BIND): do not bind; core: bind rank i to
                       the i-th usable CPU; auto: the same, when there are at least as
                       many CPUs as ranks (as mpirun binds)
  --max-restarts K     when a rank fails, stop the others and start every rank again, up
                       to K times (torchrun's elastic restart on one host; default 0). The
                       ranks see which start it is in PLAIT_RESTART_COUNT and
                       TORCHELASTIC_RESTART_COUNT; a job that checkpoints resumes from there
  --enable-recovery    when a rank fails, report it and let the others go on: they recover
                       in the job (Communicator::shrink), as mpirun --enable-recovery. The
                       status is then 0 when at least one rank exits 0
  -h, --help           show this text

exit status: 0 when every rank exits 0; else the failing rank's status (128 + signal number
when it was killed), 128 + signal when plait run is interrupted, 124 on --timeout, 127 when
the command is not found, 126 when it cannot be executed, 2 on a usage error.
)";

struct RunArgs {
  LocalJobOptions job;
  bool help = false;
};

int parse_rank_count(const std::string& text) {
  char* end = nullptr;
  long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || n < 1 || n > 1 << 16) {
    throw invalid_usage("-n needs a number of ranks of at least 1, not '" + text + "'");
  }
  return static_cast<int>(n);
}

// Parses the arguments after the word "run". Options end at "--" or at the first word that
// is not an option, so the command's own options need no "--".
RunArgs parse_run_args(int argc, char** argv) {
  RunArgs args;
  args.job.grace = grace_from_env();
  args.job.bind = bind_from_env();
  std::optional<int> nranks;
  int i = 0;
  // Returns the value of option `name` given as "--name=value", "-nVALUE" or "name value".
  auto value_of = [&](std::string_view arg, std::string_view name) -> std::optional<std::string> {
    if (arg == name) {
      if (i + 1 >= argc) throw invalid_usage(std::string(name) + " needs a value");
      return std::string(argv[++i]);
    }
    if (name.starts_with("--") && arg.starts_with(name) && arg.size() > name.size() &&
        arg[name.size()] == '=') {
      return std::string(arg.substr(name.size() + 1));
    }
    if (!name.starts_with("--") && arg.starts_with(name) && arg.size() > name.size()) {
      return std::string(arg.substr(name.size()));
    }
    return std::nullopt;
  };

  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;
    if (arg == "-h" || arg == "--help") {
      args.help = true;
      return args;
    }
    std::optional<std::string> value;
    if ((value = value_of(arg, "-n")) || (value = value_of(arg, "--nproc")) ||
        (value = value_of(arg, "--nproc-per-node")) ||
        (value = value_of(arg, "--nproc_per_node"))) {
      nranks = parse_rank_count(*value);
    } else if ((value = value_of(arg, "--timeout"))) {
      args.job.timeout = parse_seconds(*value, "--timeout");
      if (args.job.timeout.count() == 0) throw invalid_usage("--timeout must be more than 0");
    } else if ((value = value_of(arg, "--grace"))) {
      args.job.grace = parse_seconds(*value, "--grace");
    } else if ((value = value_of(arg, "--max-restarts"))) {
      char* end = nullptr;
      const long k = std::strtol(value->c_str(), &end, 10);
      if (value->empty() || *end != '\0' || k < 0 || k > 1000)
        throw invalid_usage("--max-restarts needs a number from 0 to 1000, not '" + *value + "'");
      args.job.max_restarts = static_cast<int>(k);
    } else if (arg == "--enable-recovery") {
      args.job.enable_recovery = true;
    } else if ((value = value_of(arg, "--bind"))) {
      if (*value != "auto" && *value != "core" && *value != "none")
        throw invalid_usage("--bind takes auto, core or none, not '" + *value + "'");
      args.job.bind = *value;
    } else {
      throw invalid_usage("unknown option '" + std::string(arg) + "'");
    }
  }
  if (!nranks) throw invalid_usage("the number of ranks is missing (-n N)");
  args.job.nranks = *nranks;
  for (; i < argc; ++i) args.job.command.emplace_back(argv[i]);
  if (args.job.command.empty()) throw invalid_usage("no command to run");
  return args;
}

}  // namespace

int run_main(int argc, char** argv) {
  RunArgs args;
  try {
    args = parse_run_args(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "plait run: %s\n\n%s", e.message().c_str(), kUsage);
    return 2;
  }
  if (args.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  try {
    return run_local_job_with_restarts(args.job);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plait run: %s\n", e.what());
    return 1;
  }
}

}  // namespace plait::cli
