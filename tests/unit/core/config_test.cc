// The PLAIT_* registry: every row is documented and parses its own default, each setting's
// accepted forms and errors, and parse_bytes' grammar.
#include "core/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "plait/error.h"
#include "plait/run/launcher_settings.h"
#include "ps/ps_settings.h"
#include "transport/shm/shm_settings.h"
#include "transport/tcp/tcp_settings.h"

namespace plait {
namespace {

Config parse_one(const std::string& name, const std::string& value) {
  return Config::from_env({{name, value}});
}

// The error must name the variable, the bad value and what would have been accepted.
void expect_rejected(const std::string& name, const std::string& value,
                     const std::string& accepted_hint) {
  try {
    parse_one(name, value);
    ADD_FAILURE() << name << "=" << value << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    std::string what = e.what();
    EXPECT_NE(what.find(name), std::string::npos) << what;
    EXPECT_NE(what.find("'" + value + "'"), std::string::npos) << what;
    EXPECT_NE(what.find(accepted_hint), std::string::npos) << what;
  }
}

TEST(ConfigRegistry, EveryRowIsDocumentedUniqueAndParsesItsDefault) {
  const auto& rows = settings();
  std::set<std::string> names;
  for (const SettingInfo& row : rows) {
    SCOPED_TRACE(row.name);
    EXPECT_TRUE(row.name.starts_with("PLAIT_"));
    EXPECT_TRUE(names.insert(row.name).second) << "declared twice";
    EXPECT_FALSE(row.type.empty());
    EXPECT_FALSE(row.doc.empty());
    EXPECT_EQ(row.doc.find('\n'), std::string::npos) << "doc is one line";
    // The default text is what an untouched Config holds...
    EXPECT_EQ(setting_value(Config{}, row.name), row.default_value);
    // ...and setting it explicitly changes nothing.
    if (!row.default_value.empty()) {
      EXPECT_EQ(setting_value(parse_one(row.name, row.default_value), row.name), row.default_value);
    }
  }
}

TEST(ConfigRegistry, HasOneAlgoRowPerCollective) {
  std::set<std::string> names;
  for (const SettingInfo& row : settings()) names.insert(row.name);
  for (const char* op :
       {"ALLREDUCE", "REDUCE", "BROADCAST", "ALLGATHER", "ALLGATHERV", "REDUCE_SCATTER",
        "REDUCE_SCATTERV", "ALLTOALL", "ALLTOALLV", "GATHER", "SCATTER", "BARRIER"}) {
    EXPECT_TRUE(names.count(std::string("PLAIT_ALGO_") + op)) << op;
  }
  for (const char* base :
       {"PLAIT_TIMEOUT", "PLAIT_CONNECT_TIMEOUT", "PLAIT_TRANSPORT", "PLAIT_LOG",
        "PLAIT_TCP_STREAMS", "PLAIT_TCP_STRIPE", "PLAIT_TCP_NOTSENT_LOWAT", "PLAIT_TCP_IFNAME", "PLAIT_EAGER_THRESHOLD",
        "PLAIT_CHUNK_BYTES", "PLAIT_WAIT", "PLAIT_SPIN_US", "PLAIT_PS_ROOTS",
        "PLAIT_RUN_GRACE_S", "PLAIT_HOST_ID", "PLAIT_SHM_CMA", "PLAIT_TUNE_FILE",
        "PLAIT_MAX_UNEXPECTED", "PLAIT_MAX_UNEXPECTED_MSGS", "PLAIT_STORE_MAX_HANDSHAKES",
        "PLAIT_SHM_COLL", "PLAIT_SHM_COLL_SLOT", "PLAIT_BIND", "PLAIT_PS_SERVERS",
        "PLAIT_PS_PARTITION", "PLAIT_PS_CHUNK", "PLAIT_PS_SLOTS", "PLAIT_PS_WINDOW", "PLAIT_PS_WAIT",
        "PLAIT_KEEPALIVE", "PLAIT_PEER_TIMEOUT", "PLAIT_STALL_WARN", "PLAIT_STALL_REQUESTS", "PLAIT_TCP_INTEGRITY",
        "PLAIT_UCX_TLS", "PLAIT_SHUFFLE_MEMORY", "PLAIT_SHUFFLE_SPILL_DIR", "PLAIT_SHUFFLE_DIRECT_IO"}) {
    EXPECT_TRUE(names.count(base)) << base;
  }
  EXPECT_EQ(settings().size(), 50u);
}

TEST(ConfigRegistry, BoundsOnWhatPeersMayMakeUsHoldParseAndRefuseNonsense) {
  Config d = Config::from_env(std::map<std::string, std::string>{});
  EXPECT_EQ(d.max_unexpected_bytes, size_t{512} << 20);
  EXPECT_EQ(d.max_unexpected_messages, size_t{1} << 20);
  EXPECT_EQ(d.store_max_handshakes, 256);
  Config c = Config::from_env({{"PLAIT_MAX_UNEXPECTED", "64M"},
                               {"PLAIT_MAX_UNEXPECTED_MSGS", "1000"},
                               {"PLAIT_STORE_MAX_HANDSHAKES", "8"}});
  EXPECT_EQ(c.max_unexpected_bytes, size_t{64} << 20);
  EXPECT_EQ(c.max_unexpected_messages, 1000u);
  EXPECT_EQ(c.store_max_handshakes, 8);
  EXPECT_THROW(Config::from_env({{"PLAIT_MAX_UNEXPECTED_MSGS", "0"}}), Error);
  EXPECT_THROW(Config::from_env({{"PLAIT_STORE_MAX_HANDSHAKES", "100000"}}), Error);
  EXPECT_THROW(Config::from_env({{"PLAIT_MAX_UNEXPECTED", "lots"}}), Error);
}

TEST(ConfigRegistry, ShmCollSlotIsAutoOrABoundedSize) {
  EXPECT_EQ(Config::from_env(std::map<std::string, std::string>{}).shm_coll_slot, 0u);
  EXPECT_EQ(Config::from_env({{"PLAIT_SHM_COLL_SLOT", "auto"}}).shm_coll_slot, 0u);
  EXPECT_EQ(Config::from_env({{"PLAIT_SHM_COLL_SLOT", "256K"}}).shm_coll_slot, size_t{256} << 10);
  EXPECT_THROW(Config::from_env({{"PLAIT_SHM_COLL_SLOT", "1K"}}), Error);
  EXPECT_THROW(Config::from_env({{"PLAIT_SHM_COLL_SLOT", "1G"}}), Error);
  EXPECT_THROW(Config::from_env({{"PLAIT_SHM_COLL_SLOT", "big"}}), Error);
}

TEST(ConfigRegistry, RunGraceTakesSecondsOrAUnit) {
  EXPECT_EQ(Config::from_env({{"PLAIT_RUN_GRACE_S", "5"}}).get<cli::LauncherSettings>().grace, std::chrono::seconds(5));
  EXPECT_EQ(Config::from_env({{"PLAIT_RUN_GRACE_S", "500ms"}}).get<cli::LauncherSettings>().grace,
            std::chrono::milliseconds(500));
  EXPECT_THROW(Config::from_env({{"PLAIT_RUN_GRACE_S", "soon"}}), Error);
}

TEST(ConfigRegistry, EmptyEnvironmentGivesDefaults) {
  Config c = Config::from_env(std::map<std::string, std::string>{});
  Config d;
  EXPECT_EQ(c.timeout, d.timeout);
  EXPECT_EQ(c.connect_timeout, d.connect_timeout);
  EXPECT_EQ(c.transport, "auto");
  EXPECT_EQ(c.log_level, "warn");
  EXPECT_EQ(c.get<transport::TcpSettings>().streams, 2);
  EXPECT_EQ(c.get<transport::TcpSettings>().stripe_bytes, 256u * 1024);
  EXPECT_EQ(c.wait_policy, WaitPolicy::kHybrid);
  EXPECT_TRUE(c.algo.empty());
}

TEST(ConfigRegistry, EmptyValuesAndUnknownVariablesAreIgnored) {
  Config c = Config::from_env(
      {{"PLAIT_TCP_STREAMS", ""}, {"PLAIT_NO_SUCH_THING", "x"}, {"PLAIT_TIMEOUT", "  "}});
  EXPECT_EQ(c.get<transport::TcpSettings>().streams, 2);
  EXPECT_EQ(c.timeout, Config{}.timeout);
}

TEST(ConfigTimeouts, AcceptMillisecondsAndSuffixes) {
  using std::chrono::milliseconds;
  EXPECT_EQ(parse_one("PLAIT_TIMEOUT", "1500").timeout, milliseconds(1500));
  EXPECT_EQ(parse_one("PLAIT_TIMEOUT", "500ms").timeout, milliseconds(500));
  EXPECT_EQ(parse_one("PLAIT_TIMEOUT", "30s").timeout, milliseconds(30000));
  EXPECT_EQ(parse_one("PLAIT_TIMEOUT", "2m").timeout, milliseconds(120000));
  EXPECT_EQ(parse_one("PLAIT_TIMEOUT", " 45 S ").timeout, milliseconds(45000));
  EXPECT_EQ(parse_one("PLAIT_TIMEOUT", "1h").timeout, milliseconds(3600000));
  EXPECT_EQ(parse_one("PLAIT_TIMEOUT", "1500us").timeout, milliseconds(2));  // rounds up
  EXPECT_EQ(parse_one("PLAIT_CONNECT_TIMEOUT", "10s").connect_timeout, milliseconds(10000));
  for (const char* bad : {"abc", "-5", "0", "0s", "10x", "1.5s", "s", "99999999999999999999"}) {
    expect_rejected("PLAIT_TIMEOUT", bad, "30s");
  }
  expect_rejected("PLAIT_CONNECT_TIMEOUT", "soon", "30s");
}

TEST(ConfigKeepAlive, PeerTimeoutFollowsTheTimeoutWithinBoundsUnlessSet) {
  using std::chrono::milliseconds;
  Config c;  // PLAIT_TIMEOUT 300 s: a silent peer is failed after a minute
  EXPECT_EQ(effective_peer_timeout(c), milliseconds(60000));
  c.timeout = milliseconds(4000);  // at least 5 keep-alive periods
  EXPECT_EQ(effective_peer_timeout(c), milliseconds(5000));
  c.timeout = milliseconds(20000);
  EXPECT_EQ(effective_peer_timeout(c), milliseconds(20000));
  c = parse_one("PLAIT_PEER_TIMEOUT", "3s");
  EXPECT_EQ(effective_peer_timeout(c), milliseconds(3000));
  c.keepalive = milliseconds(2000);  // never below 2 periods
  EXPECT_EQ(effective_peer_timeout(c), milliseconds(4000));
  c = parse_one("PLAIT_KEEPALIVE", "0");
  EXPECT_EQ(c.keepalive, milliseconds(0));
  EXPECT_EQ(effective_peer_timeout(c), milliseconds(0));  // off
  EXPECT_EQ(parse_one("PLAIT_KEEPALIVE", "250ms").keepalive, milliseconds(250));
  EXPECT_EQ(parse_one("PLAIT_PEER_TIMEOUT", "AUTO").peer_timeout, milliseconds(0));
  expect_rejected("PLAIT_KEEPALIVE", "-1", "0 (off)");
  expect_rejected("PLAIT_PEER_TIMEOUT", "0", "30s");
}

TEST(ConfigStallWarn, AutoIsAQuarterOfTheTimeoutWithinBounds) {
  using std::chrono::milliseconds;
  Config c;
  EXPECT_EQ(effective_stall_warn(c, milliseconds(300000)), milliseconds(60000));
  EXPECT_EQ(effective_stall_warn(c, milliseconds(20000)), milliseconds(5000));
  EXPECT_EQ(effective_stall_warn(c, milliseconds(500)), milliseconds(1000));
  EXPECT_EQ(effective_stall_warn(parse_one("PLAIT_STALL_WARN", "2s"), milliseconds(500)),
            milliseconds(2000));
  EXPECT_EQ(effective_stall_warn(parse_one("PLAIT_STALL_WARN", "0"), milliseconds(500)),
            milliseconds(0));
  EXPECT_EQ(parse_one("PLAIT_STALL_WARN", "Auto").stall_warn, milliseconds(-1));
  expect_rejected("PLAIT_STALL_WARN", "soon", "0 (off)");
}

TEST(ConfigTcpIntegrity, IsOffByDefaultAndTakesZeroOrOne) {
  EXPECT_FALSE(Config{}.get<transport::TcpSettings>().integrity);
  EXPECT_TRUE(parse_one("PLAIT_TCP_INTEGRITY", "1").get<transport::TcpSettings>().integrity);
  EXPECT_TRUE(parse_one("PLAIT_TCP_INTEGRITY", "ON").get<transport::TcpSettings>().integrity);
  EXPECT_FALSE(parse_one("PLAIT_TCP_INTEGRITY", "0").get<transport::TcpSettings>().integrity);
  expect_rejected("PLAIT_TCP_INTEGRITY", "maybe", "0 or 1");
}

TEST(ConfigEnums, AcceptAnyCaseAndListChoicesOnError) {
  EXPECT_EQ(parse_one("PLAIT_TRANSPORT", "TCP").transport, "tcp");
  EXPECT_EQ(parse_one("PLAIT_TRANSPORT", "shm").transport, "shm");
  EXPECT_EQ(parse_one("PLAIT_SHM_CMA", "off").get<transport::ShmSettings>().cma, "off");
  EXPECT_EQ(parse_one("PLAIT_HOST_ID", " node7 ").host_id, "node7");
  EXPECT_EQ(parse_one("PLAIT_LOG", "Debug").log_level, "debug");
  EXPECT_EQ(parse_one("PLAIT_WAIT", "spin").wait_policy, WaitPolicy::kSpin);
  EXPECT_EQ(parse_one("PLAIT_WAIT", "hybrid").wait_policy, WaitPolicy::kHybrid);
  EXPECT_EQ(parse_one("PLAIT_WAIT", "block").wait_policy, WaitPolicy::kBlock);
  expect_rejected("PLAIT_TRANSPORT", "carrier-pigeon", "auto|tcp");
  expect_rejected("PLAIT_LOG", "verbose", "error|warn|info|debug");
  expect_rejected("PLAIT_WAIT", "poll", "spin|block|hybrid");
}

TEST(ConfigIntegers, RangesAreChecked) {
  EXPECT_EQ(parse_one("PLAIT_TCP_STREAMS", "1").get<transport::TcpSettings>().streams, 1);
  EXPECT_EQ(parse_one("PLAIT_TCP_STREAMS", "64").get<transport::TcpSettings>().streams, 64);
  for (const char* bad : {"0", "65", "-1", "2.5", "four", "4 4"}) {
    expect_rejected("PLAIT_TCP_STREAMS", bad, "1..64");
  }
  EXPECT_EQ(parse_one("PLAIT_PS_ROOTS", "0").ps_roots, 0);
  EXPECT_EQ(parse_one("PLAIT_PS_ROOTS", "3").ps_roots, 3);
  expect_rejected("PLAIT_PS_ROOTS", "-1", ">= 0");
  expect_rejected("PLAIT_PS_ROOTS", "99999999999", ">= 0");
  // The parameter server's settings.
  Config ps = Config::from_env(std::map<std::string, std::string>{});
  EXPECT_EQ(ps.get<ps::PsSettings>().servers, 1);
  EXPECT_EQ(ps.get<ps::PsSettings>().partition_bytes, size_t{4} << 20);
  EXPECT_EQ(ps.get<ps::PsSettings>().chunk_bytes, size_t{256} << 10);
  EXPECT_EQ(parse_one("PLAIT_PS_CHUNK", "64K").get<ps::PsSettings>().chunk_bytes, size_t{64} << 10);
  EXPECT_EQ(ps.get<ps::PsSettings>().slots, 8);
  EXPECT_EQ(ps.get<ps::PsSettings>().wait, WaitPolicy::kHybrid);
  EXPECT_EQ(parse_one("PLAIT_PS_SERVERS", "3").get<ps::PsSettings>().servers, 3);
  expect_rejected("PLAIT_PS_SERVERS", "0", ">= 1");
  EXPECT_EQ(parse_one("PLAIT_PS_PARTITION", "1M").get<ps::PsSettings>().partition_bytes, size_t{1} << 20);
  expect_rejected("PLAIT_PS_PARTITION", "1K", "at least 4096 bytes");
  expect_rejected("PLAIT_PS_PARTITION", "2G", "4K..1G");
  EXPECT_EQ(parse_one("PLAIT_PS_SLOTS", "16").get<ps::PsSettings>().slots, 16);
  expect_rejected("PLAIT_PS_SLOTS", "0", "1..1024");
  EXPECT_EQ(ps.get<ps::PsSettings>().window_bytes, size_t{2} << 20);
  EXPECT_EQ(parse_one("PLAIT_PS_WINDOW", "0").get<ps::PsSettings>().window_bytes, 0u);
  EXPECT_EQ(parse_one("PLAIT_PS_WINDOW", "512K").get<ps::PsSettings>().window_bytes, size_t{512} << 10);
  expect_rejected("PLAIT_PS_WINDOW", "100", "at least 4096 bytes");
  expect_rejected("PLAIT_PS_WINDOW", "4G", "0, or 4K..1G");
  EXPECT_EQ(parse_one("PLAIT_PS_WAIT", "block").get<ps::PsSettings>().wait, WaitPolicy::kBlock);
  expect_rejected("PLAIT_PS_WAIT", "sometimes", "spin");
  EXPECT_EQ(parse_one("PLAIT_SPIN_US", "0").spin_time.count(), 0);
  EXPECT_EQ(parse_one("PLAIT_SPIN_US", "100").spin_time.count(), 100);
  EXPECT_EQ(parse_one("PLAIT_SPIN_US", "2ms").spin_time.count(), 2000);
  expect_rejected("PLAIT_SPIN_US", "-3", "microseconds");
}

TEST(ConfigBytes, SettingsTakeByteSizes) {
  EXPECT_EQ(parse_one("PLAIT_TCP_STRIPE", "1M").get<transport::TcpSettings>().stripe_bytes, 1u << 20);
  EXPECT_EQ(parse_one("PLAIT_TCP_STRIPE", "4096").get<transport::TcpSettings>().stripe_bytes, 4096u);
  EXPECT_EQ(setting_value(parse_one("PLAIT_TCP_STRIPE", "1048576"), "PLAIT_TCP_STRIPE"), "1M");
  expect_rejected("PLAIT_TCP_STRIPE", "0", "at least 1");
  expect_rejected("PLAIT_TCP_STRIPE", "lots", "256K");
  EXPECT_EQ(parse_one("PLAIT_EAGER_THRESHOLD", "64K").eager_threshold, 65536u);
  EXPECT_EQ(parse_one("PLAIT_CHUNK_BYTES", "0").chunk_bytes, 0u);
  EXPECT_EQ(parse_one("PLAIT_CHUNK_BYTES", "1.5M").chunk_bytes, 1572864u);
  EXPECT_EQ(setting_value(parse_one("PLAIT_CHUNK_BYTES", "1000"), "PLAIT_CHUNK_BYTES"), "1000");
}

TEST(ConfigStrings, InterfaceIsKeptVerbatim) {
  EXPECT_EQ(parse_one("PLAIT_TCP_IFNAME", "eth0").get<transport::TcpSettings>().interface, "eth0");
  EXPECT_EQ(parse_one("PLAIT_TCP_IFNAME", "10.0.0.7").get<transport::TcpSettings>().interface, "10.0.0.7");
}

TEST(ConfigAlgo, ForcedAlgorithmsAreKeyedByLowerCaseOp) {
  Config c = Config::from_env({{"PLAIT_ALGO_ALLREDUCE", "ring"},
                               {"PLAIT_ALGO_REDUCE_SCATTERV", "Halving_Doubling"},
                               {"PLAIT_ALGO_BARRIER", "auto"}});
  EXPECT_EQ(c.algo.at("allreduce"), "ring");
  EXPECT_EQ(c.algo.at("reduce_scatterv"), "halving_doubling");
  EXPECT_EQ(c.algo.count("barrier"), 0u) << "auto leaves the choice to the cost model";
  EXPECT_EQ(setting_value(c, "PLAIT_ALGO_ALLREDUCE"), "ring");
  EXPECT_EQ(setting_value(c, "PLAIT_ALGO_BARRIER"), "auto");
  c.algo["gather"] = "binomial_tree";  // settable in code
  EXPECT_EQ(setting_value(c, "PLAIT_ALGO_GATHER"), "binomial_tree");
  for (const char* name : {"naive", "ps", "recursive_doubling", "binomial_tree"}) {
    EXPECT_EQ(parse_one("PLAIT_ALGO_BROADCAST", name).algo.at("broadcast"), name);
  }
  expect_rejected("PLAIT_ALGO_ALLGATHER", "bogus", "ring|halving_doubling");
}

TEST(ConfigRegistry, UnknownSettingNameThrows) {
  EXPECT_THROW(setting_value(Config{}, "PLAIT_NOPE"), Error);
}

TEST(ConfigRegistry, ProcessEnvironmentIsReadAfreshEachTime) {
  ASSERT_EQ(setenv("PLAIT_TCP_STREAMS", "7", 1), 0);
  ASSERT_EQ(setenv("PLAIT_ALGO_ALLTOALL", "naive", 1), 0);
  Config first = Config::from_env();
  ASSERT_EQ(setenv("PLAIT_TCP_STREAMS", "9", 1), 0);
  Config second = Config::from_env();
  unsetenv("PLAIT_TCP_STREAMS");
  unsetenv("PLAIT_ALGO_ALLTOALL");
  EXPECT_EQ(first.get<transport::TcpSettings>().streams, 7);
  EXPECT_EQ(first.algo.at("alltoall"), "naive");
  EXPECT_EQ(second.get<transport::TcpSettings>().streams, 9);
}

TEST(ConfigParseBytes, AcceptedForms) {
  EXPECT_EQ(parse_bytes("0"), 0u);
  EXPECT_EQ(parse_bytes("8"), 8u);
  EXPECT_EQ(parse_bytes("8B"), 8u);
  EXPECT_EQ(parse_bytes("4K"), 4096u);
  EXPECT_EQ(parse_bytes("4k"), 4096u);
  EXPECT_EQ(parse_bytes("4KB"), 4096u);
  EXPECT_EQ(parse_bytes("4KiB"), 4096u);
  EXPECT_EQ(parse_bytes("256K"), 262144u);
  EXPECT_EQ(parse_bytes("64M"), 64u << 20);
  EXPECT_EQ(parse_bytes("64 MiB"), 64u << 20);
  EXPECT_EQ(parse_bytes("1G"), size_t{1} << 30);
  EXPECT_EQ(parse_bytes("2T"), size_t{2} << 40);
  EXPECT_EQ(parse_bytes("1.5M"), 1572864u);
  EXPECT_EQ(parse_bytes("0.5K"), 512u);
  EXPECT_EQ(parse_bytes(" 16 "), 16u);
  EXPECT_EQ(parse_bytes("16383T"), size_t{16383} << 40);
}

TEST(ConfigParseBytes, RejectedForms) {
  for (const char* bad : {"", "K", "-1", "+1", "1.1K", "1.5", "1.", ".5K", "4X", "1e6", "4KK",
                          "4 K B", "0x10", "16777216T", "18446744073709551616", "1.1234567891K"}) {
    try {
      parse_bytes(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace plait
