// The typed registry of PLAIT_* settings. Every setting is declared once (name, type,
// default, meaning) in config.cc; Config::from_env() reads them all into a plain struct that
// the objects which use them own (no setting is cached in a static). Users set them from code
// by name through CommunicatorOptions::settings, which from_env(map) parses like the
// environment; internal code and tests may also change fields after from_env().
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace plait {

enum class WaitPolicy { kSpin, kBlock, kHybrid };

struct Config {
  std::chrono::milliseconds timeout{300000};          // PLAIT_TIMEOUT (ms): every wait
  std::chrono::milliseconds connect_timeout{120000};  // PLAIT_CONNECT_TIMEOUT (ms)
  std::string transport = "auto";                     // PLAIT_TRANSPORT: auto|tcp|shm|ucx|shm+ucx
  // PLAIT_KEEPALIVE (ms, 0 = off) and PLAIT_PEER_TIMEOUT (ms, 0 = auto): see
  // effective_peer_timeout().
  std::chrono::milliseconds keepalive{1000};
  std::chrono::milliseconds peer_timeout{0};
  // PLAIT_STALL_WARN (ms, 0 = off, -1 = auto): see effective_stall_warn().
  std::chrono::milliseconds stall_warn{-1};
  // PLAIT_STALL_REQUESTS: the file `plait run` writes its SIGUSR1 requests for a stall report
  // to (set by plait run; empty: none)
  std::string stall_requests;

  std::string host_id;  // PLAIT_HOST_ID: overrides the host identity (simulated hosts)
  std::string shm_cma = "auto";  // PLAIT_SHM_CMA: auto|on|off, cross-memory attach in shm
  // PLAIT_SHM_COLL: auto|off, collectives in a shared segment when all ranks share a host
  std::string shm_coll = "auto";
  // PLAIT_SHM_COLL_SLOT: bytes per rank and round; 0 = auto (kShmCollSlotFor below)
  size_t shm_coll_slot = 0;
  std::string tune_file;  // PLAIT_TUNE_FILE: tuned cost constants; empty = default path
  std::string log_level = "warn";                     // PLAIT_LOG: error|warn|info|debug
  int tcp_streams = 2;                                // PLAIT_TCP_STREAMS: sockets per peer
  size_t tcp_stripe_bytes = 256 * 1024;               // PLAIT_TCP_STRIPE: striping unit
  // PLAIT_TCP_NOTSENT_LOWAT: unsent bytes a tcp socket holds (TCP_NOTSENT_LOWAT); 0 = the
  // kernel's default (as much as the send buffer takes)
  size_t tcp_notsent_lowat = 128 * 1024;
  std::string tcp_interface;                          // PLAIT_TCP_IFNAME / address to bind
  bool tcp_integrity = false;  // PLAIT_TCP_INTEGRITY: every tcp frame authenticated
  std::string ucx_tls;         // PLAIT_UCX_TLS: UCX transports (UCX_TLS syntax); empty = UCX's
  size_t eager_threshold = 0;          // PLAIT_EAGER_THRESHOLD: 0 = from the cost model
  size_t chunk_bytes = 0;              // PLAIT_CHUNK_BYTES: pipelining unit, 0 = automatic
  // PLAIT_MAX_UNEXPECTED / _MSGS: per peer, what may be buffered before its receive is posted
  size_t max_unexpected_bytes = size_t{512} << 20;
  size_t max_unexpected_messages = size_t{1} << 20;
  int store_max_handshakes = 256;  // PLAIT_STORE_MAX_HANDSHAKES: embedded store, at once
  WaitPolicy wait_policy = WaitPolicy::kHybrid;  // PLAIT_WAIT: spin|block|hybrid
  std::chrono::microseconds spin_time{50};       // PLAIT_SPIN_US: hybrid's spin budget
  int ps_roots = 0;                   // PLAIT_PS_ROOTS: k roots of the ps algorithm, 0 = auto
  // The parameter server (ps::KVStore): servers, largest partition placed on one server,
  // largest chunk moved at once, ring slots per worker and server, and how its completion
  // threads wait.
  int ps_servers = 1;                          // PLAIT_PS_SERVERS
  size_t ps_partition_bytes = size_t{4} << 20;  // PLAIT_PS_PARTITION (placement unit)
  size_t ps_chunk_bytes = size_t{256} << 10;    // PLAIT_PS_CHUNK (transfer unit, ring slot)
  int ps_slots = 8;                            // PLAIT_PS_SLOTS
  size_t ps_window_bytes = size_t{2} << 20;    // PLAIT_PS_WINDOW (0: no window)
  WaitPolicy ps_wait = WaitPolicy::kHybrid;    // PLAIT_PS_WAIT
  // The shuffle (plait sort run): map output held in memory before spilling (0: no budget),
  // and where spill files go ("" = $TMPDIR, else /tmp).
  size_t shuffle_memory_bytes = 0;  // PLAIT_SHUFFLE_MEMORY
  std::string shuffle_spill_dir;    // PLAIT_SHUFFLE_SPILL_DIR
  bool shuffle_direct_io = true;    // PLAIT_SHUFFLE_DIRECT_IO: sort files past the page cache
  std::chrono::milliseconds run_grace{3000};  // PLAIT_RUN_GRACE_S: plait run's SIGTERM->SIGKILL
  // PLAIT_BIND: plait run's CPU binding (none, auto, core). Not bound by default: a rank's
  // helper threads (the torch backend's completion thread) then need not share its core.
  std::string run_bind = "none";
  // PLAIT_ALGO_<OP>: forced algorithm per collective, keyed by lower-case op name
  // ("allreduce" -> "ring"). Empty or "auto" means the cost model chooses.
  std::map<std::string, std::string> algo;

  // Reads every PLAIT_* variable from the given environment. Throws Error(kInvalidUsage)
  // naming the variable and the accepted values when one does not parse.
  static Config from_env(const std::map<std::string, std::string>& env);
  static Config from_env();  // the process environment
};

// How long a peer may stay silent before it is failed: 0 when keep-alives are off.
std::chrono::milliseconds effective_peer_timeout(const Config& config);

// When a collective that waits is reported by the stall inspector (0: never), for a
// communicator whose operations time out after `timeout`.
std::chrono::milliseconds effective_stall_warn(const Config& config,
                                               std::chrono::milliseconds timeout);

// One row of the registry, for `plait info` and the README's table.
struct SettingInfo {
  std::string name;           // "PLAIT_TIMEOUT"
  std::string type;           // "milliseconds", "int", "bytes", "string", "enum: spin|block|hybrid"
  std::string default_value;  // as text
  std::string doc;            // one line
};
const std::vector<SettingInfo>& settings();
// The value a setting has in `config`, as text (for `plait info`).
std::string setting_value(const Config& config, const std::string& name);

// Parses "64M", "4KiB", "1G", "123" into bytes; throws Error(kInvalidUsage).
size_t parse_bytes(const std::string& text);

}  // namespace plait
