// The PLAIT_* registry: each setting is one row built in make_rows() below (name, type,
// default, doc, and how its text becomes a Config field and back). Nothing here caches a value:
// every from_env() reads the environment afresh into a Config that its owner keeps.
#include "core/config.h"

#include <cstdio>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "plait/error.h"

extern char** environ;

namespace plait {
namespace {

// What a row does with its variable; `name` lets one parser serve the PLAIT_ALGO_<OP> family.
using ParseFn = void (*)(Config& config, const std::string& name, const std::string& value);
using ShowFn = std::string (*)(const Config& config, const std::string& name);

struct SettingRow {
  SettingInfo info;
  ParseFn parse;
  ShowFn show;
};

// The accepted words of each enum setting: parsing, the type column and the error messages
// all read these lists.
using Choices = std::span<const std::string_view>;
constexpr std::string_view kTransports[] = {"auto", "tcp", "shm", "ucx", "shm+ucx"};
constexpr std::string_view kCmaModes[] = {"auto", "on", "off"};
constexpr std::string_view kShmCollModes[] = {"auto", "off"};
constexpr std::string_view kLogLevels[] = {"error", "warn", "info", "debug"};
constexpr std::string_view kWaitPolicies[] = {"spin", "block", "hybrid"};  // WaitPolicy order
constexpr std::string_view kAlgoNames[] = {
    "auto",          "naive",         "ps",
    "ring",          "halving_doubling", "recursive_doubling",
    "binomial_tree", "double_binary_tree", "hierarchical"};

constexpr std::string_view kAlgoPrefix = "PLAIT_ALGO_";
constexpr std::string_view kAlgoOps[] = {
    "allreduce",       "reduce",   "broadcast", "allgather", "allgatherv", "reduce_scatter",
    "reduce_scatterv", "alltoall", "alltoallv", "gather",    "scatter",    "barrier"};

std::string trim(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string join_choices(Choices choices) {
  std::string out;
  for (std::string_view c : choices) {
    if (!out.empty()) out += '|';
    out += c;
  }
  return out;
}

std::string enum_type(Choices choices) { return "enum: " + join_choices(choices); }

[[noreturn]] void reject(const std::string& name, const std::string& value,
                         const std::string& expected) {
  throw invalid_usage(name + "='" + value + "' is not valid: expected " + expected,
                      {.op = "config"});
}

// Digits only: no sign, no spaces inside, nothing after.
bool parse_digits(std::string_view text, uint64_t& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

int64_t parse_int_in(const std::string& name, const std::string& value, int64_t min, int64_t max) {
  uint64_t n = 0;
  if (!parse_digits(trim(value), n) || n < static_cast<uint64_t>(min) ||
      n > static_cast<uint64_t>(max)) {
    std::string range = max == std::numeric_limits<int>::max()
                            ? " >= " + std::to_string(min)
                            : " in " + std::to_string(min) + ".." + std::to_string(max);
    reject(name, value, "an integer" + range);
  }
  return static_cast<int64_t>(n);
}

// "<digits>[unit]", unit one of us|ms|s|m|h, `plain_unit_us` when there is none. Returns
// microseconds, or -1 when the text does not parse or exceeds kMaxDurationUs.
constexpr int64_t kMaxDurationUs = int64_t{1} << 60;  // ~36,000 years; leaves room to round
int64_t parse_duration_us(const std::string& text, int64_t plain_unit_us) {
  std::string t = lower(trim(text));
  size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  uint64_t n = 0;
  if (!parse_digits(std::string_view(t).substr(0, digits), n)) return -1;
  std::string unit = trim(t.substr(digits));
  int64_t scale = unit.empty()   ? plain_unit_us
                  : unit == "us" ? 1
                  : unit == "ms" ? 1000
                  : unit == "s"  ? 1000 * 1000
                  : unit == "m"  ? int64_t{60} * 1000 * 1000
                  : unit == "h"  ? int64_t{3600} * 1000 * 1000
                                 : 0;
  if (scale == 0 || n > static_cast<uint64_t>(kMaxDurationUs / scale)) {
    return -1;
  }
  return static_cast<int64_t>(n) * scale;
}

// Timeouts: at least 1 ms; a value in us rounds up so a timeout never becomes shorter.
std::chrono::milliseconds parse_timeout(const std::string& name, const std::string& value) {
  int64_t us = parse_duration_us(value, 1000);
  if (us <= 0) reject(name, value, "a positive duration: milliseconds, or 500ms, 30s, 2m");
  return std::chrono::milliseconds((us + 999) / 1000);
}

// A period that 0 turns off.
std::chrono::milliseconds parse_duration_or_off(const std::string& name, const std::string& value) {
  if (trim(value) == "0") return std::chrono::milliseconds(0);
  int64_t us = parse_duration_us(value, 1000);
  if (us <= 0) reject(name, value, "a duration such as 1000 (ms), 500ms, 2s, or 0 (off)");
  return std::chrono::milliseconds((us + 999) / 1000);
}

// Case-insensitive; returns the index of the choice.
size_t parse_choice(const std::string& name, const std::string& value, Choices choices) {
  const std::string v = lower(trim(value));
  for (size_t i = 0; i < choices.size(); ++i) {
    if (v == choices[i]) return i;
  }
  reject(name, value, "one of " + join_choices(choices));
}

size_t parse_bytes_setting(const std::string& name, const std::string& value, size_t min) {
  size_t n = 0;
  try {
    n = parse_bytes(value);
  } catch (const Error&) {
    reject(name, value, "a size in bytes such as 65536, 256K, 4MiB, 1G");
  }
  if (n < min) reject(name, value, "a size of at least " + std::to_string(min) + " bytes");
  return n;
}

std::string format_bytes(size_t n) {
  constexpr std::string_view kSuffixes[] = {"T", "G", "M", "K"};
  for (size_t i = 0; i < 4; ++i) {
    size_t unit = size_t{1} << (10 * (4 - i));
    if (n != 0 && n % unit == 0) return std::to_string(n / unit) + std::string(kSuffixes[i]);
  }
  return std::to_string(n);
}

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

std::vector<SettingRow> make_rows() {
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
      {{"PLAIT_TCP_INTEGRITY", "0 | 1", "0",
        "1: every tcp frame carries AES-GMAC tags, so that data altered on the wire is an "
        "error naming the peer; every rank must set it alike"},
       [](Config& c, const std::string& n, const std::string& v) {
         const std::string t = lower(trim(v));
         if (t == "1" || t == "on" || t == "true") c.tcp_integrity = true;
         else if (t == "0" || t == "off" || t == "false") c.tcp_integrity = false;
         else reject(n, v, "0 or 1");
       },
       [](const Config& c, const std::string&) { return std::string(c.tcp_integrity ? "1" : "0"); }},
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
      {{"PLAIT_SHM_CMA", enum_type(kCmaModes), "auto",
        "shm provider: single-copy cross-memory attach (process_vm_readv); off = copy via rings"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.shm_cma = kCmaModes[parse_choice(n, v, kCmaModes)];
       },
       [](const Config& c, const std::string&) { return c.shm_cma; }},
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
        "Level of diagnostics on stderr (read once per process by the logger)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.log_level = kLogLevels[parse_choice(n, v, kLogLevels)];
       },
       [](const Config& c, const std::string&) { return c.log_level; }},
      {{"PLAIT_TCP_STREAMS", "int: 1..64", "2",
        "TCP sockets per peer; large messages are striped across them"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.tcp_streams = static_cast<int>(parse_int_in(n, v, 1, 64));
       },
       [](const Config& c, const std::string&) { return std::to_string(c.tcp_streams); }},
      {{"PLAIT_TCP_STRIPE", "bytes", "256K",
        "Striping unit across a peer's TCP sockets (K/M/G are binary multiples)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.tcp_stripe_bytes = parse_bytes_setting(n, v, 1);
       },
       [](const Config& c, const std::string&) { return format_bytes(c.tcp_stripe_bytes); }},
      {{"PLAIT_TCP_NOTSENT_LOWAT", "bytes", "128K",
        "Unsent bytes the kernel holds per TCP socket before plait's queue takes over (replies "
        "overtake queued data only there); 0 = the kernel's default"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.tcp_notsent_lowat = parse_bytes_setting(n, v, 0);
       },
       [](const Config& c, const std::string&) { return format_bytes(c.tcp_notsent_lowat); }},
      {{"PLAIT_TCP_IFNAME", "string", "",
        "Interface name or local address the TCP provider binds to; empty = automatic"},
       [](Config& c, const std::string&, const std::string& v) { c.tcp_interface = trim(v); },
       [](const Config& c, const std::string&) { return c.tcp_interface; }},
      {{"PLAIT_UCX_TLS", "string", "",
        "Transports the ucx provider may use (UCX_TLS syntax: rc,sm / tcp / ^ud); empty = UCX_TLS or all"},
       [](Config& c, const std::string&, const std::string& v) { c.ucx_tls = trim(v); },
       [](const Config& c, const std::string&) { return c.ucx_tls; }},
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
        "Embedded store: connections authenticated at once; more wait in the listen queue"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.store_max_handshakes = static_cast<int>(parse_int_in(n, v, 1, 65536));
       },
       [](const Config& c, const std::string&) { return std::to_string(c.store_max_handshakes); }},
      {{"PLAIT_WAIT", enum_type(kWaitPolicies), "hybrid",
        "How waits poll completions: busy-poll, sleep, or spin until PLAIT_SPIN_US pass without progress, then sleep"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.wait_policy = static_cast<WaitPolicy>(parse_choice(n, v, kWaitPolicies));
       },
       [](const Config& c, const std::string&) {
         return std::string(kWaitPolicies[static_cast<size_t>(c.wait_policy)]);
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
      {{"PLAIT_PS_SERVERS", "int: >= 1", "1",
        "Parameter server: how many ranks are servers (ps::Options::servers overrides it)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.ps_servers = static_cast<int>(parse_int_in(n, v, 1, std::numeric_limits<int>::max()));
       },
       [](const Config& c, const std::string&) { return std::to_string(c.ps_servers); }},
      {{"PLAIT_PS_PARTITION", "bytes: 4K..1G", "4M",
        "Parameter server: keys larger than this are split into partitions spread over the servers"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.ps_partition_bytes = parse_bytes_setting(n, v, 4096);
         if (c.ps_partition_bytes > (size_t{1} << 30)) reject(n, v, "bytes: 4K..1G");
       },
       [](const Config& c, const std::string&) { return format_bytes(c.ps_partition_bytes); }},
      {{"PLAIT_PS_CHUNK", "bytes: 4K..1G", "256K",
        "Parameter server: what one push, reply or ring slot carries at most (a partition is cut into chunks)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.ps_chunk_bytes = parse_bytes_setting(n, v, 4096);
         if (c.ps_chunk_bytes > (size_t{1} << 30)) reject(n, v, "bytes: 4K..1G");
       },
       [](const Config& c, const std::string&) { return format_bytes(c.ps_chunk_bytes); }},
      {{"PLAIT_PS_SLOTS", "int: 1..1024", "8",
        "Parameter server: ring-buffer slots (one partition each) per worker on each server"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.ps_slots = static_cast<int>(parse_int_in(n, v, 1, 1024));
       },
       [](const Config& c, const std::string&) { return std::to_string(c.ps_slots); }},
      {{"PLAIT_PS_WINDOW", "bytes: 0, or 4K..1G", "2M",
        "Parameter server: push bytes a worker keeps on the wire at once, over all servers (0: only the slots limit)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.ps_window_bytes = v == "0" ? 0 : parse_bytes_setting(n, v, 4096);
         if (c.ps_window_bytes > (size_t{1} << 30)) reject(n, v, "bytes: 0, or 4K..1G");
       },
       [](const Config& c, const std::string&) { return format_bytes(c.ps_window_bytes); }},
      {{"PLAIT_PS_WAIT", enum_type(kWaitPolicies), "hybrid",
        "Parameter server: how its completion threads wait (busy-poll, sleep, or spin then sleep)"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.ps_wait = static_cast<WaitPolicy>(parse_choice(n, v, kWaitPolicies));
       },
       [](const Config& c, const std::string&) {
         return std::string(kWaitPolicies[static_cast<size_t>(c.ps_wait)]);
       }},
      {{"PLAIT_SHUFFLE_MEMORY", "bytes, or 0 (no budget)", "0",
        "Shuffle (plait sort run): map output kept in memory per rank before runs spill to files; also bounds a reducer's merge windows"},
       [](Config& c, const std::string& n, const std::string& v) {
         c.shuffle_memory_bytes = v == "0" ? 0 : parse_bytes_setting(n, v, 1);
       },
       [](const Config& c, const std::string&) {
         return c.shuffle_memory_bytes == 0 ? std::string("0") : format_bytes(c.shuffle_memory_bytes);
       }},
      {{"PLAIT_SHUFFLE_SPILL_DIR", "string", "",
        "Shuffle: directory of spill files (created unlinked, gone with the process); empty = $TMPDIR, else /tmp"},
       [](Config& c, const std::string&, const std::string& v) { c.shuffle_spill_dir = trim(v); },
       [](const Config& c, const std::string&) { return c.shuffle_spill_dir; }},
      {{"PLAIT_SHUFFLE_DIRECT_IO", "0 or 1", "1",
        "plait sort gen/run and the shuffle's spill: record and spill files written, and record files read, past the page cache (O_DIRECT where the file system has it)"},
       [](Config& c, const std::string& n, const std::string& v) {
         const std::string t = trim(v);
         if (t != "0" && t != "1") throw invalid_usage(n + " takes 0 or 1, not '" + v + "'");
         c.shuffle_direct_io = t == "1";
       },
       [](const Config& c, const std::string&) { return std::string(c.shuffle_direct_io ? "1" : "0"); }},
      {{"PLAIT_RUN_GRACE_S", "seconds", "3",
        "plait run: time between SIGTERM and SIGKILL when it stops ranks; also 500ms"},
       [](Config& c, const std::string& n, const std::string& v) {
         int64_t us = parse_duration_us(v, 1000000);
         if (us < 0) reject(n, v, "a duration: seconds, or 500ms, 2m");
         c.run_grace = std::chrono::milliseconds((us + 999) / 1000);
       },
       [](const Config& c, const std::string&) {
         char text[32];
         std::snprintf(text, sizeof text, "%g", c.run_grace.count() / 1000.0);
         return std::string(text);
       }},
      {{"PLAIT_BIND", "auto|core|none", "none",
        "plait run: bind rank i to the i-th CPU it may use (core), or only when there are at "
        "least as many CPUs as ranks (auto), or not (none)"},
       [](Config& c, const std::string& n, const std::string& v) {
         if (v != "auto" && v != "core" && v != "none") reject(n, v, "auto, core or none");
         c.run_bind = v;
       },
       [](const Config& c, const std::string&) { return c.run_bind; }},
  };
  for (std::string_view op : kAlgoOps) {
    rows.push_back({{std::string(kAlgoPrefix) + upper(op), enum_type(kAlgoNames), "auto",
                     "Forces the " + std::string(op) + " algorithm; auto = the cost model picks"},
                    parse_algo,
                    show_algo});
  }
  return rows;
}

// Immutable metadata built once; values never live here.
const std::vector<SettingRow>& rows() {
  static const std::vector<SettingRow> table = make_rows();
  return table;
}

const SettingRow* find_row(const std::string& name) {
  for (const SettingRow& row : rows()) {
    if (row.info.name == name) return &row;
  }
  return nullptr;
}

}  // namespace

Config Config::from_env(const std::map<std::string, std::string>& env) {
  Config config;
  for (const SettingRow& row : rows()) {
    auto it = env.find(row.info.name);
    // An empty variable counts as unset, as `PLAIT_X= cmd` in a shell usually intends.
    if (it == env.end() || trim(it->second).empty()) continue;
    row.parse(config, row.info.name, it->second);
  }
  return config;
}

Config Config::from_env() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    if (!text.starts_with("PLAIT_")) continue;
    size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return from_env(env);
}

std::chrono::milliseconds effective_peer_timeout(const Config& config) {
  using std::chrono::milliseconds;
  if (config.keepalive.count() == 0) return milliseconds(0);
  // Fewer than a few periods would fail a live peer whose keep-alive was merely late (a
  // starved progress thread); more than a minute leaves a stopped host unnoticed for long.
  if (config.peer_timeout.count() != 0) return std::max(config.peer_timeout, 2 * config.keepalive);
  return std::max(std::min(config.timeout, milliseconds(60000)), 5 * config.keepalive);
}

std::chrono::milliseconds effective_stall_warn(const Config& config,
                                               std::chrono::milliseconds timeout) {
  using std::chrono::milliseconds;
  if (config.stall_warn.count() >= 0) return config.stall_warn;
  return std::clamp(timeout / 4, milliseconds(1000), milliseconds(60000));
}

const std::vector<SettingInfo>& settings() {
  static const std::vector<SettingInfo> infos = [] {
    std::vector<SettingInfo> out;
    for (const SettingRow& row : rows()) out.push_back(row.info);
    return out;
  }();
  return infos;
}

std::string setting_value(const Config& config, const std::string& name) {
  const SettingRow* row = find_row(name);
  if (row == nullptr) throw invalid_usage("unknown setting '" + name + "'", {.op = "config"});
  return row->show(config, name);
}

// Grammar: <digits>[.<digits>][ ][unit], unit (any case) one of B, K, KB, KiB, M, MB, MiB,
// G, GB, GiB, T, TB, TiB; every multiple is binary (K = 1024, also "KB", as NCCL reads it).
// A fraction is accepted when the result is a whole number of bytes ("1.5M", not "1.1K").
size_t parse_bytes(const std::string& text) {
  auto fail = [&text](const std::string& why) -> Error {
    return invalid_usage(
        "'" + text + "' is not a byte size: " + why + " (examples: 8, 4096, 256K, 64M, 4KiB, 1.5G)",
        {.op = "parse bytes"});
  };
  const std::string t = lower(trim(text));
  size_t pos = 0;
  while (pos < t.size() && std::isdigit(static_cast<unsigned char>(t[pos]))) ++pos;
  uint64_t whole = 0;
  if (!parse_digits(std::string_view(t).substr(0, pos), whole)) throw fail("no number");
  uint64_t fraction = 0, fraction_scale = 1;
  if (pos < t.size() && t[pos] == '.') {
    size_t start = ++pos;
    while (pos < t.size() && std::isdigit(static_cast<unsigned char>(t[pos]))) ++pos;
    if (pos == start || pos - start > 9) throw fail("1 to 9 digits after the point");
    parse_digits(std::string_view(t).substr(start, pos - start), fraction);
    for (size_t i = start; i < pos; ++i) fraction_scale *= 10;
  }
  const std::string unit = trim(t.substr(pos));
  int shift = -1;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else {
    constexpr std::string_view kUnits = "kmgt";
    size_t index = kUnits.find(unit[0]);
    std::string_view rest = std::string_view(unit).substr(1);
    if (index != std::string_view::npos && (rest.empty() || rest == "b" || rest == "ib")) {
      shift = 10 * static_cast<int>(index + 1);
    }
  }
  if (shift < 0) throw fail("unknown unit '" + unit + "'");
  // bytes = (whole + fraction / fraction_scale) << shift, computed exactly.
  uint64_t scaled = 0, numerator = 0;
  if (__builtin_mul_overflow(whole, fraction_scale, &scaled) ||
      __builtin_add_overflow(scaled, fraction, &scaled) || shift >= 64 ||
      __builtin_mul_overflow(scaled, uint64_t{1} << shift, &numerator)) {
    throw fail("too large");
  }
  if (numerator % fraction_scale != 0) throw fail("not a whole number of bytes");
  uint64_t bytes = numerator / fraction_scale;
  if (bytes > std::numeric_limits<size_t>::max()) throw fail("too large");
  return static_cast<size_t>(bytes);
}

}  // namespace plait
