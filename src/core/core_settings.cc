// The general PLAIT_* settings: Config's own fields, read by more than one layer (timeouts,
// the transport's choice, waiting, the collectives' algorithms and pipelining). A layer's own
// settings are its section, registered beside its code (core/settings_registry.h).
#include <limits>
#include <string_view>

#include "core/config.h"
#include "core/setting_parsers.h"
#include "core/settings_registry.h"

namespace plait {
namespace {

// The accepted words of each enum setting: parsing, the type column and the error messages
// all read these lists.
constexpr std::string_view kTransports[] = {"auto", "tcp", "shm", "ucx", "shm+ucx"};
constexpr std::string_view kCmaModes[] = {"auto", "on", "off"};
constexpr std::string_view kShmCollModes[] = {"auto", "off"};
constexpr std::string_view kLogLevels[] = {"error", "warn", "info", "debug"};
constexpr std::string_view kAlgoNames[] = {
    "auto",          "naive",         "ps",
    "ring",          "halving_doubling", "recursive_doubling",
    "binomial_tree", "double_binary_tree", "hierarchical"};

constexpr std::string_view kAlgoPrefix = "PLAIT_ALGO_";
constexpr std::string_view kAlgoOps[] = {
    "allreduce",       "reduce",   "broadcast", "allgather", "allgatherv", "reduce_scatter",
    "reduce_scatterv", "alltoall", "alltoallv", "gather",    "scatter",    "barrier"};


std::string algo_op(const std::string& name) { return lower(name.substr(kAlgoPrefix.size())); }

void parse_algo(Config& c, const std::string& name, const std::string& value) {
  const size_t choice = parse_choice(name, value, kAlgoNames);
  // Only forced choices are stored: an absent key is the cost model's choice.
  if (choice == 0) {
    c.algo.erase(algo_op(name));
  } else {
    c.algo[algo_op(name)] = std::string(kAlgoNames[choice]);
  }
}

std::string show_algo(const Config& c, const std::string& name) {
  auto it = c.algo.find(algo_op(name));
  return it == c.algo.end() || it->second.empty() ? "auto" : it->second;
}


}  // namespace

std::vector<SettingRow> core_setting_rows() {
  std::vector<SettingRow> rows = {
      {{"PLAIT_TIMEOUT", "milliseconds", "300000",
        "Limit on every wait (collective, receive, store get); also 30s, 500ms, 2m"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.timeout = parse_timeout(n, v);
       },
       [](const Config& c, const std::string&) { return std::to_string(c.timeout.count()); }},
      {{"PLAIT_CONNECT_TIMEOUT", "milliseconds", "120000",
        "Limit on reaching the store and connecting to peers at start-up; also 30s, 2m"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.connect_timeout = parse_timeout(n, v);
       },
       [](const Config& c, const std::string&) {
         return std::to_string(c.connect_timeout.count());
       }},
      {{"PLAIT_KEEPALIVE", "milliseconds, or 0 (off)", "1000",
        "How often the tcp provider sends a keep-alive to a peer it has nothing else to send"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.keepalive = parse_duration_or_off(n, v);
       },
       [](const Config& c, const std::string&) { return std::to_string(c.keepalive.count()); }},
      {{"PLAIT_PEER_TIMEOUT", "milliseconds, or auto", "auto",
        "A tcp peer silent this long (keep-alives included) is failed, even with no operation "
        "pending; auto: PLAIT_TIMEOUT, at most 60s, at least 5 keep-alive periods"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.peer_timeout = lower(trim(v)) == "auto" ? std::chrono::milliseconds(0)
                                                   : parse_timeout(n, v);
       },
       [](const Config& c, const std::string&) {
         return c.peer_timeout.count() == 0 ? std::string("auto")
                                            : std::to_string(c.peer_timeout.count());
       }},
      {{"PLAIT_STALL_WARN", "milliseconds, auto, or 0 (off)", "auto",
        "A collective waiting this long makes every rank log which ranks have not called it "
        "and where they are; auto: a quarter of PLAIT_TIMEOUT, 1s..60s"},
       [](Config& c, const std::string& n, const std::string& v) {
         if (lower(trim(v)) == "auto") {
           c.stall_warn = std::chrono::milliseconds(-1);
           return;
         }
         c.stall_warn = parse_duration_or_off(n, v);
       },
       [](const Config& c, const std::string&) {
         return c.stall_warn.count() < 0 ? std::string("auto")
                                         : std::to_string(c.stall_warn.count());
       }},
      {{"PLAIT_STALL_REQUESTS", "path", "",
        "Set by plait run: the file where it counts its SIGUSR1 requests for a stall report, "
        "which each rank's world communicator reads every tick (no store call)"},
       [](Config& c, const std::string&, const std::string& v) { c.stall_requests = trim(v); },
       [](const Config& c, const std::string&) { return c.stall_requests; }},
      {{"PLAIT_TRANSPORT", enum_type(kTransports), "auto",
        "Transport between ranks; auto: shm to peers on this host, to the others ucx where "
        "both hosts have an RDMA NIC, else tcp; ucx: UCX to every peer; shm+ucx: shm on this "
        "host, ucx to the others"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.transport = kTransports[parse_choice(n, v, kTransports)];
       },
       [](const Config& c, const std::string&) { return c.transport; }},
      {{"PLAIT_HOST_ID", "string", "",
        "Overrides this rank's host identity (boot id + namespaces); simulates several hosts"},
       [](Config& c, const std::string&, const std::string& v) { c.host_id = trim(v); },
       [](const Config& c, const std::string&) { return c.host_id; }},
      {{"PLAIT_SHM_COLL", enum_type(kShmCollModes), "auto",
        "Collectives in a segment shared by a communicator's ranks when all share a host "
        "(the shm algorithm), or by each host's ranks (the hierarchical allreduce's stages "
        "within hosts); off = messages only"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.shm_coll = kShmCollModes[parse_choice(n, v, kShmCollModes)];
       },
       [](const Config& c, const std::string&) { return c.shm_coll; }},
      {{"PLAIT_SHM_COLL_SLOT", "auto | bytes: 4K..64M", "auto",
        "shm algorithm: bytes each rank moves per round (the segment holds 2 per rank + 2); "
        "auto = 64K, or 1M when the host has more ranks than cores"},
       [](Config& c, const std::string& n, const std::string& v) {
         if (trim(v) == "auto") {
           c.shm_coll_slot = 0;
           return;
         }
         c.shm_coll_slot = parse_bytes_setting(n, v, 4096);
         if (c.shm_coll_slot > (size_t{64} << 20))
           reject(n, v, "auto or a size from 4K to 64M");
       },
       [](const Config& c, const std::string&) {
         return c.shm_coll_slot ? format_bytes(c.shm_coll_slot) : std::string("auto");
       }},
      {{"PLAIT_TUNE_FILE", "string", "",
        "Cost constants written by `plait tune`; empty = $XDG_CACHE_HOME/plait/tune.conf"},
       [](Config& c, const std::string&, const std::string& v) { c.tune_file = trim(v); },
       [](const Config& c, const std::string&) { return c.tune_file; }},
      {{"PLAIT_LOG", enum_type(kLogLevels), "warn",
        "Level of diagnostics on stderr (read once per process by the logger)", true},
       [](Config& c, const std::string& n, const std::string& v) {
         c.log_level = kLogLevels[parse_choice(n, v, kLogLevels)];
       },
       [](const Config& c, const std::string&) { return c.log_level; }},
      {{"PLAIT_EAGER_THRESHOLD", "bytes", "0",
        "Smallest message sent by rendezvous instead of eagerly; 0 = the provider's default (tcp 2M)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.eager_threshold = parse_bytes_setting(n, v, 0);
       },
       [](const Config& c, const std::string&) { return format_bytes(c.eager_threshold); }},
      {{"PLAIT_CHUNK_BYTES", "bytes", "0",
        "Pipelining unit of collective schedules; 0 = automatic"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.chunk_bytes = parse_bytes_setting(n, v, 0);
       },
       [](const Config& c, const std::string&) { return format_bytes(c.chunk_bytes); }},
      {{"PLAIT_MAX_UNEXPECTED", "bytes", "512M",
        "Per peer: eager bytes that may wait for their receive; a peer sending more is an error"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.max_unexpected_bytes = parse_bytes_setting(n, v, 0);
       },
       [](const Config& c, const std::string&) { return format_bytes(c.max_unexpected_bytes); }},
      {{"PLAIT_MAX_UNEXPECTED_MSGS", "int: 1..2^40", "1048576",
        "Per peer: messages that may wait for their receive; a peer sending more is an error"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.max_unexpected_messages = static_cast<size_t>(parse_int_in(n, v, 1, int64_t{1} << 40));
       },
       [](const Config& c, const std::string&) {
         return std::to_string(c.max_unexpected_messages);
       }},
      {{"PLAIT_STORE_MAX_HANDSHAKES", "int: 1..65536", "256",
        "Embedded store: connections authenticated at once; more wait in the listen queue", true},
       [](Config& c, const std::string& n, const std::string& v) {
         c.store_max_handshakes = static_cast<int>(parse_int_in(n, v, 1, 65536));
       },
       [](const Config& c, const std::string&) { return std::to_string(c.store_max_handshakes); }},
      {{"PLAIT_WAIT", enum_type(kWaitPolicyNames), "hybrid",
        "How waits poll completions: busy-poll, sleep, or spin until PLAIT_SPIN_US pass without progress, then sleep"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.wait_policy = static_cast<WaitPolicy>(parse_choice(n, v, kWaitPolicyNames));
       },
       [](const Config& c, const std::string&) {
         return std::string(kWaitPolicyNames[static_cast<size_t>(c.wait_policy)]);
       }},
      {{"PLAIT_SPIN_US", "microseconds", "50",
        "How long the hybrid wait policy spins without progress before it sleeps; also 2ms"},
       [](Config& c, const std::string& n, const std::string& v) {
         int64_t us = parse_duration_us(v, 1);
         if (us < 0) reject(n, v, "a duration >= 0: microseconds, or 2ms");
         c.spin_time = std::chrono::microseconds(us);
       },
       [](const Config& c, const std::string&) { return std::to_string(c.spin_time.count()); }},
      {{"PLAIT_PS_ROOTS", "int: >= 0", "0",
        "Number of roots k of the parameter-server (ps) algorithm; 0 = automatic"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.ps_roots = static_cast<int>(parse_int_in(n, v, 0, std::numeric_limits<int>::max()));
       },
       [](const Config& c, const std::string&) { return std::to_string(c.ps_roots); }},
  };
  for (std::string_view op : kAlgoOps) {
    rows.push_back({{std::string(kAlgoPrefix) + upper(op), enum_type(kAlgoNames), "auto",
                     "Forces the " + std::string(op) + " algorithm; auto = the cost model picks"},
                    parse_algo,
                    show_algo});
  }
  return rows;
}

}  // namespace plait
