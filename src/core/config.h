// The typed registry of PLAIT_* settings. Every setting is declared once (name, type,
// default, meaning) by the layer that owns it: the general ones, Config's own fields, in
// core_settings.cc; a layer's own in a section, a struct of its settings that it registers
// (core/settings_registry.h), such as the tcp provider's transport::TcpSettings, read as
// config.get<transport::TcpSettings>(). Config::from_env() reads every registered setting into
// a plain value that the objects which use them own (no setting is cached in a static). Users
// set them from code by name through CommunicatorOptions::settings, which from_env(map) parses
// like the environment; internal code and tests may also change fields after from_env().
#pragma once

#include <any>
#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace plait {

enum class WaitPolicy { kSpin, kBlock, kHybrid };
inline constexpr std::string_view kWaitPolicyNames[] = {"spin", "block", "hybrid"};  // in order

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
  // PLAIT_SHM_COLL: auto|off, collectives in a shared segment when all ranks share a host
  std::string shm_coll = "auto";
  // PLAIT_SHM_COLL_SLOT: bytes per rank and round; 0 = auto (kShmCollSlotFor below)
  size_t shm_coll_slot = 0;
  std::string tune_file;  // PLAIT_TUNE_FILE: tuned cost constants; empty = default path
  std::string log_level = "warn";                     // PLAIT_LOG: error|warn|info|debug
  size_t eager_threshold = 0;          // PLAIT_EAGER_THRESHOLD: 0 = from the cost model
  size_t chunk_bytes = 0;              // PLAIT_CHUNK_BYTES: pipelining unit, 0 = automatic
  // PLAIT_MAX_UNEXPECTED / _MSGS: per peer, what may be buffered before its receive is posted
  size_t max_unexpected_bytes = size_t{512} << 20;
  size_t max_unexpected_messages = size_t{1} << 20;
  int store_max_handshakes = 256;  // PLAIT_STORE_MAX_HANDSHAKES: embedded store, at once
  WaitPolicy wait_policy = WaitPolicy::kHybrid;  // PLAIT_WAIT: spin|block|hybrid
  std::chrono::microseconds spin_time{50};       // PLAIT_SPIN_US: hybrid's spin budget
  int ps_roots = 0;                   // PLAIT_PS_ROOTS: k roots of the ps algorithm, 0 = auto
  // PLAIT_ALGO_<OP>: forced algorithm per collective, keyed by lower-case op name
  // ("allreduce" -> "ring"). Empty or "auto" means the cost model chooses.
  std::map<std::string, std::string> algo;

  // Every registered section at its defaults.
  Config();

  // A layer's section of settings (a struct registered with register_settings<Section>()).
  template <class Section>
  const Section& get() const;
  template <class Section>
  Section& get();

  // Reads every PLAIT_* variable from the given environment. Throws Error(kInvalidUsage)
  // naming the variable and the accepted values when one does not parse.
  static Config from_env(const std::map<std::string, std::string>& env);
  static Config from_env();  // the process environment

 private:
  std::vector<std::any> sections_;  // by Section::settings_index
};

template <class Section>
const Section& Config::get() const {
  if (Section::settings_index < sections_.size()) {
    if (const auto* s = std::any_cast<Section>(&sections_[Section::settings_index])) return *s;
  }
  static const Section defaults{};
  return defaults;
}

template <class Section>
Section& Config::get() {
  if (Section::settings_index >= sections_.size()) sections_.resize(Section::settings_index + 1);
  std::any& slot = sections_[Section::settings_index];
  if (!slot.has_value()) slot = Section{};
  return std::any_cast<Section&>(slot);
}

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
  // Read once by the process or by the launcher, not per object: refused in the settings
  // given to one object in code (CommunicatorOptions::settings).
  bool process_wide = false;
};
const std::vector<SettingInfo>& settings();
// The value a setting has in `config`, as text (for `plait info`).
std::string setting_value(const Config& config, const std::string& name);

// Parses "64M", "4KiB", "1G", "123" into bytes; throws Error(kInvalidUsage).
size_t parse_bytes(const std::string& text);

}  // namespace plait
