// Measured cost constants: the file `plait tune` writes and the fabric setup reads.
//
// The file is plain text, one `scope.field = value` per line, `#` starts a comment:
//
//   # plait tune 0.1.0, 2026-11-22T17:40:00Z, host node7, Intel(R) Xeon(R) ..., 2 cpus
//   shm.alpha_us = 0.45
//   shm.beta_bytes_per_us = 5200
//   tcp.alpha_us = 14.1
//   tcp.beta_bytes_per_us = 2900
//   host.gamma_bytes_per_us = 8100
//   host.copy_bytes_per_us = 9400
//
// A scope is a provider name ("shm", "tcp", any future one) or "host" for what the CPU does
// whatever carries the bytes (reductions, copies). Fields are fixed (kTunedFields) so that a
// typo is an error instead of a silently ignored line; values are finite and positive.
//
// The scope "net" holds what `plait tune --topology SPEC --ranks N` computed of a network the
// job cannot measure from inside (coll::CostParams::host_contention): ring_contention, and
// contention_at_D for D = 1, 2, 4, ... hosts apart.
//
//   net.contention_at_1 = 1
//   net.contention_at_2 = 1.8
//   net.ring_contention = 1
//
// Without a file every constant keeps the provider's built-in default: tuning only refines.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/config.h"
#include "transport/fabric.h"
#include "transport/providers.h"

namespace plait::transport {

// The fields a line may set. Units: microseconds, bytes per microsecond (1000 = 1 GB/s).
inline constexpr std::string_view kTunedFields[] = {"alpha_us", "beta_bytes_per_us",
                                                    "gamma_bytes_per_us", "copy_bytes_per_us",
                                                    "flag_us"};
inline constexpr std::string_view kHostScope = "host";
inline constexpr std::string_view kNetworkScope = "net";
inline constexpr std::string_view kRingContention = "ring_contention";
inline constexpr std::string_view kContentionAt = "contention_at_";  // + hosts apart, 2^k

class TunedCosts {
 public:
  // The value of `scope.field`, if the file set it.
  std::optional<double> get(std::string_view scope, std::string_view field) const;
  // Throws Error(kInvalidUsage) for a field not in kTunedFields, a malformed scope, or a
  // value that is not finite and positive: the same rules the parser applies.
  void set(std::string_view scope, std::string_view field, double value);
  bool empty() const { return values_.empty(); }
  // "scope.field" -> value, sorted by key (the order the file is written in).
  const std::map<std::string, double, std::less<>>& values() const { return values_; }

  // Where these values came from, for `plait info` and logs: the path looked at, and whether
  // a file was there (false: the built-in defaults apply).
  std::string path;
  bool found = false;

 private:
  std::map<std::string, double, std::less<>> values_;
};

// The file a Config points at: config.tune_file (PLAIT_TUNE_FILE), else
// $XDG_CACHE_HOME/plait/tune.conf, else $HOME/.cache/plait/tune.conf; empty when neither
// variable is set (then there is no file to read or write by default).
std::string tune_file_path(const Config& config, const std::map<std::string, std::string>& env);
std::string tune_file_path(const Config& config);  // the process environment

// Parses file text. `source` names it in errors: "<source>:<line>: <what is wrong>", thrown as
// Error(kInvalidUsage).
TunedCosts parse_tuned_costs(std::string_view text, const std::string& source);
// The file text for `costs`: `header` (one "# " comment line per line of it), then the
// values sorted by key, each printed exactly (parsing gives back the same doubles).
std::string format_tuned_costs(const TunedCosts& costs, std::string_view header);

// Reads the file at `path`. A missing file yields empty costs (found = false), not an error;
// a malformed one throws Error(kInvalidUsage) naming path:line; an unreadable one kSystem.
TunedCosts load_tuned_costs_file(const std::string& path);
// load_tuned_costs_file(tune_file_path(config)).
TunedCosts load_tuned_costs(const Config& config);

// Writes the file atomically (a temporary file in the same directory, fsync, rename), so a
// reader sees the old file or the new one, never half of one; creates missing directories.
// Throws Error(kSystem) naming the path.
void save_tuned_costs(const std::string& path, const TunedCosts& costs, std::string_view header);

// `defaults` with every value `costs` measured for `provider` in place: alpha and beta from
// `<provider>.*`; gamma, copy and flag from `<provider>.*`, else from `host.*`. The eager threshold
// is left alone: the provider fixed it when it was created.
CostModel apply_tuned(const CostModel& defaults, const TunedCosts& costs,
                      std::string_view provider);

// For create_fabric(), once the providers exist and `topology` is filled: replaces
// topology.intra and topology.inter by apply_tuned() of the providers serving them (intra:
// shm when a peer on this host uses it, else tcp; inter: tcp when some peer uses it, else
// the intra provider).
//
// Every rank must rank algorithms with the same constants, or their schedules would not
// match (algorithms.h), so rank 0 alone reads the file and publishes it through
// options.store; the others wait for it there (within options.config.connect_timeout).
// A malformed file fails on every rank with rank 0's file:line message.
void apply_tuned_topology(const FabricOptions& options, FabricTopology& topology);

}  // namespace plait::transport
