// Launcher-environment detection (who am I in the job, where is the store) and bootstrap
// (host and/or connect to that store). See plait/bootstrap.h for the precedence rules.
#include <unistd.h>

#include <charconv>
#include <optional>

#include "plait/bootstrap.h"
#include "plait/error.h"
#include "plait/store.h"

extern char** environ;

namespace plait {
namespace {

using Env = std::map<std::string, std::string>;

const ErrorContext kDetect{.op = "launch environment"};

// Which variables carry a launcher's identity. The first launcher whose rank variable is set
// wins; plait's own come first so `plait run` inside an allocation still means plait.
struct LauncherVars {
  Launcher launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;  // Slurm's is derived, see slurm_local_size()
};

constexpr LauncherVars kLaunchers[] = {
    {Launcher::kPlait, "PLAIT_RANK", "PLAIT_WORLD_SIZE", "PLAIT_LOCAL_RANK", "PLAIT_LOCAL_SIZE"},
    {Launcher::kTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {Launcher::kOpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {Launcher::kMpich, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {Launcher::kSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

constexpr const char* kStoreHint =
    "set PLAIT_STORE_ADDR=host:port, MASTER_ADDR and MASTER_PORT (rank 0 then hosts the "
    "store), or PLAIT_STORE_PATH=<directory shared by all ranks>";

// Set and non-empty: an empty variable is as good as none.
std::optional<std::string> lookup(const Env& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

std::optional<int> parse_number(std::string_view text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

int number(const Env& env, const std::string& name, Launcher launcher) {
  std::optional<std::string> text = lookup(env, name);
  if (!text) {
    throw invalid_usage(name + " is not set, but the environment looks like a " +
                            std::string(to_string(launcher)) + " launch",
                        kDetect);
  }
  std::optional<int> value = parse_number(*text);
  if (!value) throw invalid_usage(name + "='" + *text + "' is not a non-negative integer", kDetect);
  return *value;
}

int port_number(const std::string& name, const std::string& text) {
  std::optional<int> port = parse_number(text);
  if (!port || *port < 1 || *port > 65535)
    throw invalid_usage(name + "='" + text + "' is not a TCP port (1-65535)", kDetect);
  return *port;
}

// SLURM_TASKS_PER_NODE lists tasks per node compressed, e.g. "2(x3),1" for nodes with
// 2, 2, 2 and 1 tasks. Returns the count of node `node` (SLURM_NODEID), or the first.
int slurm_tasks_on_node(const std::string& spec, int node) {
  auto malformed = [&] {
    return invalid_usage("SLURM_TASKS_PER_NODE='" + spec + "' is not a list like '2(x3),1'",
                         kDetect);
  };
  int first = -1;
  int index = 0;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = std::min(spec.find(',', pos), spec.size());
    std::string_view item(spec.data() + pos, comma - pos);
    int repeat = 1;
    if (size_t paren = item.find("(x"); paren != std::string_view::npos) {
      if (item.back() != ')') throw malformed();
      std::optional<int> r = parse_number(item.substr(paren + 2, item.size() - paren - 3));
      if (!r || *r < 1) throw malformed();
      repeat = *r;
      item = item.substr(0, paren);
    }
    std::optional<int> tasks = parse_number(item);
    if (!tasks || *tasks < 1) throw malformed();
    if (first < 0) first = *tasks;
    if (node >= index && node < index + repeat) return *tasks;
    index += repeat;
    pos = comma + 1;
  }
  return first;
}

int slurm_local_size(const Env& env) {
  if (lookup(env, "SLURM_NTASKS_PER_NODE"))
    return number(env, "SLURM_NTASKS_PER_NODE", Launcher::kSlurm);
  std::optional<std::string> spec = lookup(env, "SLURM_TASKS_PER_NODE");
  if (!spec) {
    throw invalid_usage(
        "neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set, but "
        "the environment looks like a Slurm launch",
        kDetect);
  }
  int node = -1;
  if (lookup(env, "SLURM_NODEID")) node = number(env, "SLURM_NODEID", Launcher::kSlurm);
  return slurm_tasks_on_node(*spec, node);
}

const LauncherVars* detect_launcher(const Env& env) {
  for (const auto& vars : kLaunchers) {
    if (!lookup(env, vars.rank)) continue;
    // Slurm's PMI-2 plugin also sets PMI_RANK; without Hydra's local-rank variable the
    // process was started by srun, whose own variables say more.
    if (vars.launcher == Launcher::kMpich && !lookup(env, "MPI_LOCALRANKID") &&
        lookup(env, "SLURM_PROCID"))
      continue;
    return &vars;
  }
  return nullptr;
}

void read_identity(const Env& env, const LauncherVars& vars, LaunchEnv& out) {
  Launcher l = vars.launcher;
  out.launcher = l;
  out.rank = number(env, vars.rank, l);
  if (l == Launcher::kSlurm && !lookup(env, "SLURM_NTASKS") && lookup(env, "SLURM_NPROCS"))
    out.size = number(env, "SLURM_NPROCS", l);  // older Slurm
  else
    out.size = number(env, vars.size, l);
  out.local_rank = number(env, vars.local_rank, l);
  out.local_size = vars.local_size ? number(env, vars.local_size, l) : slurm_local_size(env);

  const std::string who = std::string(to_string(l)) + " environment: ";
  if (out.size < 1)
    throw invalid_usage(who + vars.size + "=0: a job needs at least one rank", kDetect);
  if (out.rank >= out.size) {
    throw invalid_usage(who + vars.rank + "=" + std::to_string(out.rank) + " is not below " +
                            vars.size + "=" + std::to_string(out.size),
                        kDetect);
  }
  if (out.local_size < 1 || out.local_size > out.size) {
    throw invalid_usage(who + "local size " + std::to_string(out.local_size) +
                            " is not between 1 and the job size " + std::to_string(out.size),
                        kDetect);
  }
  if (out.local_rank >= out.local_size) {
    throw invalid_usage(who + vars.local_rank + "=" + std::to_string(out.local_rank) +
                            " is not below the local size " + std::to_string(out.local_size),
                        kDetect);
  }
}

// "host:port" or "[v6 address]:port".
void parse_store_addr(const std::string& text, LaunchEnv& out) {
  auto malformed = [&] {
    return invalid_usage("PLAIT_STORE_ADDR='" + text + "' is not host:port", kDetect);
  };
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) throw malformed();
  std::string host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) throw malformed();
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    throw malformed();  // a bare IPv6 address is ambiguous; it needs brackets
  }
  out.store_host = host;
  out.store_port = port_number("PLAIT_STORE_ADDR's port", text.substr(colon + 1));
}

void locate_store(const Env& env, LaunchEnv& out) {
  if (std::optional<std::string> path = lookup(env, "PLAIT_STORE_PATH")) {
    out.store_path = *path;
    return;
  }
  if (std::optional<std::string> addr = lookup(env, "PLAIT_STORE_ADDR")) {
    parse_store_addr(*addr, out);
    return;
  }
  if (std::optional<std::string> master = lookup(env, "MASTER_ADDR")) {
    out.store_host = *master;
    if (std::optional<std::string> port = lookup(env, "PLAIT_STORE_PORT")) {
      out.store_port = port_number("PLAIT_STORE_PORT", *port);
    } else {
      std::optional<std::string> master_port = lookup(env, "MASTER_PORT");
      if (!master_port) {
        throw invalid_usage(
            "MASTER_ADDR is set but MASTER_PORT is not; plait's store listens on "
            "MASTER_PORT + 1 unless PLAIT_STORE_PORT says otherwise",
            kDetect);
      }
      int base = port_number("MASTER_PORT", *master_port);
      if (base == 65535)
        throw invalid_usage("MASTER_PORT=65535 leaves no port for the store; set PLAIT_STORE_PORT",
                            kDetect);
      out.store_port = base + 1;
    }
    out.host_store = out.rank == 0;
    return;
  }
  if (out.size > 1) {
    throw invalid_usage(std::string(to_string(out.launcher)) + " job of " +
                            std::to_string(out.size) +
                            " ranks has no rendezvous store: " + kStoreHint,
                        kDetect);
  }
}

// Peers reach the hosting rank at store_host. A loopback name means a single-host job, so
// the store stays off the network; anything else may be any of this host's addresses.
std::string bind_address(const std::string& store_host) {
  if (store_host == "localhost" || store_host == "::1" || store_host.starts_with("127."))
    return store_host == "::1" ? "::1" : "127.0.0.1";
  return "0.0.0.0";
}

}  // namespace

std::string_view to_string(Launcher launcher) {
  switch (launcher) {
    case Launcher::kPlait:
      return "plait";
    case Launcher::kTorchrun:
      return "torchrun";
    case Launcher::kOpenMpi:
      return "Open MPI";
    case Launcher::kMpich:
      return "MPICH/Hydra";
    case Launcher::kSlurm:
      return "Slurm";
    case Launcher::kNone:
      return "none";
  }
  return "unknown";
}

LaunchEnv detect_launch_env(const Env& env) {
  LaunchEnv out;
  if (std::optional<std::string> token = lookup(env, "PLAIT_JOB_TOKEN")) out.job_token = *token;
  const LauncherVars* vars = detect_launcher(env);
  // Without a launcher this is a one-rank job; store variables left over in a shell (say
  // MASTER_ADDR for torch) must not make it host or dial a server.
  if (!vars) return out;
  read_identity(env, *vars, out);
  locate_store(env, out);
  return out;
}

Env environ_map() {
  Env env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

Bootstrap bootstrap_from(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  Bootstrap b;
  b.rank = env.rank;
  b.size = env.size;
  b.local_rank = env.local_rank;
  b.local_size = env.local_size;
  b.job_token = env.job_token;
  b.store_host = env.store_host;
  const ErrorContext ctx{.rank = env.rank, .op = "bootstrap"};
  try {
    if (!env.store_path.empty()) {
      b.store = make_file_store(env.store_path);
    } else if (!env.store_host.empty() && env.host_store) {
      try {
        b.store_server = std::make_shared<TcpStoreServer>(bind_address(env.store_host),
                                                          env.store_port, env.job_token);
      } catch (const Error& e) {
        throw Error(e.category(),
                    "rank 0 cannot host the store on port " + std::to_string(env.store_port) +
                        " (MASTER_PORT + 1, or PLAIT_STORE_PORT): " + e.message(),
                    ctx);
      }
      // Through loopback: the name peers use for this host may not route back to itself.
      b.store = connect_tcp_store("127.0.0.1", b.store_server->port(), env.job_token, timeout);
    } else if (!env.store_host.empty()) {
      b.store = connect_tcp_store(env.store_host, env.store_port, env.job_token, timeout);
    } else if (env.size == 1) {
      b.store = make_hash_store();
    } else {
      throw invalid_usage(
          "a job of " + std::to_string(env.size) + " ranks needs a rendezvous store: " + kStoreHint,
          ctx);
    }
  } catch (const Error& e) {
    throw e.with_context(ctx);
  }
  return b;
}

Bootstrap bootstrap_from_env(std::chrono::milliseconds timeout) {
  return bootstrap_from(detect_launch_env(environ_map()), timeout);
}

}  // namespace plait
