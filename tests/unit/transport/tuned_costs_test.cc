// The tune file (format, errors, path, atomic save), apply_tuned() and its job-wide
// counterpart apply_tuned_topology(), and the alpha-beta fit of `plait tune`.
#include "transport/tuned_costs.h"

#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "plait/error.h"
#include "plait/store.h"
#include "transport/cost_fit.h"
#include "transport/providers.h"

namespace plait::transport {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the test's temporary directory, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "plait_tune_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// Parses `text` expecting an invalid-usage error that names `<source>:<line>` and `hint`.
void expect_malformed(const std::string& text, int line, const std::string& hint) {
  SCOPED_TRACE(text);
  try {
    parse_tuned_costs(text, "/etc/tune.conf");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    const std::string what = e.what();
    EXPECT_NE(what.find("/etc/tune.conf:" + std::to_string(line) + ":"), std::string::npos)
        << what;
    EXPECT_NE(what.find(hint), std::string::npos) << what;
  }
}

TEST(TunedCosts, FormatThenParseGivesBackEveryValueExactly) {
  TunedCosts costs;
  costs.set("shm", "alpha_us", 0.45);
  costs.set("shm", "beta_bytes_per_us", 5200);
  costs.set("tcp", "alpha_us", 0.1 + 0.2);  // not short in decimal: must still round-trip
  costs.set("tcp", "beta_bytes_per_us", 2871.123456789);
  costs.set("host", "gamma_bytes_per_us", 1e-3);
  costs.set("host", "copy_bytes_per_us", 9400);
  const std::string text = format_tuned_costs(costs, "plait tune\nmachine: x\n");
  EXPECT_EQ(text.rfind("# plait tune\n# machine: x\n", 0), 0u) << text;
  EXPECT_NE(text.find("shm.alpha_us = 0.45\n"), std::string::npos) << text;

  const TunedCosts back = parse_tuned_costs(text, "round trip");
  EXPECT_EQ(back.values(), costs.values());
  EXPECT_EQ(back.get("tcp", "alpha_us"), 0.1 + 0.2);
  EXPECT_EQ(back.get("ucx", "alpha_us"), std::nullopt);
}

TEST(TunedCosts, ParseSkipsCommentsBlankLinesAndSpaces) {
  const TunedCosts costs = parse_tuned_costs(
      "# header\n\n   \ntcp.alpha_us=14   # measured\r\n  shm.beta_bytes_per_us =  5.2e3\n"
      "host.copy_bytes_per_us = 9000",  // no final newline
      "x");
  EXPECT_EQ(costs.values().size(), 3u);
  EXPECT_EQ(costs.get("tcp", "alpha_us"), 14.0);
  EXPECT_EQ(costs.get("shm", "beta_bytes_per_us"), 5200.0);
  EXPECT_EQ(costs.get("host", "copy_bytes_per_us"), 9000.0);
}

TEST(TunedCosts, MalformedLineNamesFileAndLine) {
  const std::string ok = "# ok\ntcp.alpha_us = 3\n";  // the bad line is line 3
  expect_malformed(ok + "tcp.alpha_us 3\n", 3, "expected 'scope.field = value'");
  expect_malformed(ok + "alpha_us = 3\n", 3, "scope.field");
  expect_malformed(ok + "tcp.alpha = 3\n", 3, "unknown field 'alpha'");
  expect_malformed(ok + "TCP.beta_bytes_per_us = 3\n", 3, "not a provider name");
  expect_malformed(ok + "tcp.beta_bytes_per_us = fast\n", 3, "'fast' is not a number");
  expect_malformed(ok + "tcp.beta_bytes_per_us = 3 us\n", 3, "not a number");
  expect_malformed(ok + "tcp.beta_bytes_per_us =\n", 3, "not a number");
  expect_malformed(ok + "tcp.beta_bytes_per_us = -5\n", 3, "positive");
  expect_malformed(ok + "tcp.beta_bytes_per_us = 0\n", 3, "positive");
  expect_malformed(ok + "tcp.beta_bytes_per_us = inf\n", 3, "positive");
  expect_malformed(ok + "tcp.alpha_us = 4\n", 3, "duplicate key (first set on line 2)");
}

TEST(TunedCosts, SetRejectsWhatTheParserRejects) {
  TunedCosts costs;
  EXPECT_THROW(costs.set("tcp", "latency", 1), Error);
  EXPECT_THROW(costs.set("", "alpha_us", 1), Error);
  EXPECT_THROW(costs.set("tcp", "alpha_us", -1), Error);
  EXPECT_THROW(costs.set("tcp", "alpha_us", std::nan("")), Error);
  EXPECT_TRUE(costs.empty());
}

TEST(TunedCosts, MissingFileIsEmptyNotAnError) {
  TempDir dir;
  const TunedCosts costs = load_tuned_costs_file(dir.file("no/such/tune.conf"));
  EXPECT_TRUE(costs.empty());
  EXPECT_FALSE(costs.found);
  EXPECT_EQ(costs.path, dir.file("no/such/tune.conf"));
}

TEST(TunedCosts, MalformedFileNamesItsPathAndLine) {
  TempDir dir;
  write_text(dir.file("tune.conf"), "tcp.alpha_us = 1\n\nshm.alpha_us = nope\n");
  try {
    load_tuned_costs_file(dir.file("tune.conf"));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
    EXPECT_NE(std::string(e.what()).find(dir.file("tune.conf") + ":3:"), std::string::npos)
        << e.what();
  }
}

TEST(TunedCosts, SaveCreatesDirectoriesAndLoadReadsItBack) {
  TempDir dir;
  const std::string path = dir.file("cache/plait/tune.conf");
  TunedCosts costs;
  costs.set("tcp", "alpha_us", 14.25);
  costs.set("host", "gamma_bytes_per_us", 8100);
  save_tuned_costs(path, costs, "test");
  costs.set("tcp", "alpha_us", 15);  // a second save replaces the file
  save_tuned_costs(path, costs, "test");

  Config config;
  config.tune_file = path;
  const TunedCosts back = load_tuned_costs(config);
  EXPECT_TRUE(back.found);
  EXPECT_EQ(back.path, path);
  EXPECT_EQ(back.values(), costs.values());
  // Only the file itself is left: no temporary from the atomic replace.
  size_t entries = 0;
  for (const auto& entry : fs::directory_iterator(dir.file("cache/plait"))) {
    EXPECT_EQ(entry.path().filename(), "tune.conf");
    ++entries;
  }
  EXPECT_EQ(entries, 1u);
}

TEST(TunedCosts, SaveIntoAnUnwritablePlaceIsASystemError) {
  TempDir dir;
  write_text(dir.file("file"), "");
  try {
    save_tuned_costs(dir.file("file/tune.conf"), TunedCosts{}, "");  // parent is a file
    ADD_FAILURE() << "saved";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kSystem);
    EXPECT_NE(std::string(e.what()).find(dir.file("file")), std::string::npos) << e.what();
  }
}

TEST(TunedCosts, PathFromConfigThenXdgCacheHomeThenHome) {
  Config config;
  EXPECT_EQ(tune_file_path(config, {{"XDG_CACHE_HOME", "/x"}, {"HOME", "/h"}}),
            "/x/plait/tune.conf");
  EXPECT_EQ(tune_file_path(config, {{"HOME", "/h"}}), "/h/.cache/plait/tune.conf");
  // The XDG spec says to ignore a relative XDG_CACHE_HOME.
  EXPECT_EQ(tune_file_path(config, {{"XDG_CACHE_HOME", "rel"}, {"HOME", "/h"}}),
            "/h/.cache/plait/tune.conf");
  EXPECT_EQ(tune_file_path(config, {}), "");
  config.tune_file = "/etc/plait.conf";
  EXPECT_EQ(tune_file_path(config, {{"XDG_CACHE_HOME", "/x"}}), "/etc/plait.conf");
}

TEST(TunedCosts, ApplyOverridesOnlyWhatWasMeasuredForThatProvider) {
  CostModel defaults;
  defaults.alpha_us = 15;
  defaults.beta_bytes_per_us = 3000;
  defaults.copy_bytes_per_us = 4000;
  defaults.gamma_bytes_per_us = 4000;
  defaults.eager_threshold = 65536;
  TunedCosts costs;
  costs.set("tcp", "alpha_us", 11);
  costs.set("tcp", "beta_bytes_per_us", 2500);
  costs.set("host", "gamma_bytes_per_us", 8000);
  costs.set("host", "copy_bytes_per_us", 9000);
  costs.set("shm", "copy_bytes_per_us", 12000);  // a provider's own value beats the host's
  costs.set("host", "flag_us", 0.7);

  const CostModel tcp = apply_tuned(defaults, costs, "tcp");
  EXPECT_EQ(tcp.alpha_us, 11);
  EXPECT_EQ(tcp.beta_bytes_per_us, 2500);
  EXPECT_EQ(tcp.gamma_bytes_per_us, 8000);
  EXPECT_EQ(tcp.copy_bytes_per_us, 9000);
  EXPECT_EQ(tcp.eager_threshold, 65536u);

  const CostModel shm = apply_tuned(defaults, costs, "shm");
  EXPECT_EQ(shm.alpha_us, 15);  // not measured: the default stays
  EXPECT_EQ(shm.beta_bytes_per_us, 3000);
  EXPECT_EQ(shm.copy_bytes_per_us, 12000);
  EXPECT_EQ(shm.flag_us, 0.7);
  EXPECT_EQ(tcp.flag_us, 0.7);

  const CostModel none = apply_tuned(defaults, TunedCosts{}, "tcp");
  EXPECT_EQ(none.alpha_us, 15);
  EXPECT_EQ(none.gamma_bytes_per_us, 4000);
  EXPECT_EQ(none.flag_us, CostModel{}.flag_us);
}

// Two ranks as threads over one store: rank 1's own file is absent, yet it applies rank 0's.
TEST(TunedCosts, TopologyGetsRankZerosFileOnEveryRank) {
  TempDir dir;
  write_text(dir.file("tune.conf"),
             "shm.alpha_us = 0.5\nshm.beta_bytes_per_us = 6000\ntcp.alpha_us = 9\n"
             "host.gamma_bytes_per_us = 7000\n");
  auto store = make_hash_store();
  auto options_for = [&](int rank, const std::string& file) {
    FabricOptions o{.rank = rank, .size = 2, .store = store, .name = "fabric"};
    o.config.tune_file = file;
    return o;
  };
  auto topology = [] {
    FabricTopology t;
    t.provider = {"self", "shm"};
    return t;
  };
  FabricTopology t1 = topology();
  std::thread rank1([&] { apply_tuned_topology(options_for(1, dir.file("absent")), t1); });
  FabricTopology t0 = topology();
  t0.provider = {"shm", "self"};
  apply_tuned_topology(options_for(0, dir.file("tune.conf")), t0);
  rank1.join();
  for (const FabricTopology* t : {&t0, &t1}) {
    EXPECT_EQ(t->intra.alpha_us, 0.5);
    EXPECT_EQ(t->intra.beta_bytes_per_us, 6000);
    EXPECT_EQ(t->intra.gamma_bytes_per_us, 7000);
    EXPECT_EQ(t->inter.alpha_us, 0.5);  // no tcp peer: inter is the shm link too
  }
}

TEST(TunedCosts, TopologyFailsOnEveryRankForAMalformedFile) {
  TempDir dir;
  write_text(dir.file("tune.conf"), "tcp.alpha_us = 9\ntcp.alpha_us = x\n");
  auto store = make_hash_store();
  std::string errors[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      FabricOptions o{.rank = r, .size = 2, .store = store, .name = "fabric"};
      o.config.tune_file = dir.file("tune.conf");
      FabricTopology t;
      t.provider = {"tcp", "tcp"};
      try {
        apply_tuned_topology(o, t);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (const std::string& e : errors)
    EXPECT_NE(e.find(dir.file("tune.conf") + ":2:"), std::string::npos) << e;
}

// Samples of t(n) = alpha + n / beta with multiplicative noise and a share of outliers (as
// preemption produces), several per size.
std::vector<LatencySample> synthetic(double alpha_us, double beta, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(1.0, 0.05);
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<LatencySample> samples;
  for (size_t n = 8; n <= (size_t{4} << 20); n *= 2)
    for (int i = 0; i < 15; ++i) {
      double us = (alpha_us + static_cast<double>(n) / beta) * std::max(0.5, noise(rng));
      if (unit(rng) < 0.15) us *= 2 + 8 * unit(rng);
      samples.push_back({n, us * 1e-6});
    }
  return samples;
}

TEST(CostFit, RecoversAlphaAndBetaDespiteNoiseAndOutliers) {
  struct Case {
    double alpha_us, beta;
  } cases[] = {{15, 3000}, {0.5, 8000}, {2, 500}, {50, 100000}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "alpha " << c.alpha_us << " beta " << c.beta);
    const auto samples = synthetic(c.alpha_us, c.beta, seed++);
    const LinkFit fit = fit_alpha_beta(samples);
    EXPECT_NEAR(fit.alpha_us, c.alpha_us, 0.1 * c.alpha_us);
    // Looser: where alpha dominates even 4 MiB (the last case) beta is a small signal.
    EXPECT_NEAR(fit.beta_bytes_per_us, c.beta, 0.15 * c.beta);
    EXPECT_EQ(fit.sizes, 20u);
    EXPECT_EQ(fit.samples, samples.size());
  }
}

TEST(CostFit, NeverYieldsANonPositiveOrUnboundedModel) {
  // Times that fall with size (pure noise) would give a negative slope.
  const LinkFit falling = fit_alpha_beta(std::vector<LatencySample>{
      {8, 10e-6}, {1024, 9e-6}, {65536, 8e-6}});
  EXPECT_GE(falling.alpha_us, kMinAlphaUs);
  EXPECT_GT(falling.beta_bytes_per_us, 0);
  EXPECT_LE(falling.beta_bytes_per_us, kMaxBetaBytesPerUs);
  // Times that grow faster than linearly from ~0 would give a negative intercept.
  const LinkFit steep = fit_alpha_beta(std::vector<LatencySample>{
      {8, 1e-9}, {1 << 20, 1e-3}, {4 << 20, 8e-3}});
  EXPECT_GE(steep.alpha_us, kMinAlphaUs);
  EXPECT_GE(steep.beta_bytes_per_us, kMinBetaBytesPerUs);
  // Flat times: no measurable bandwidth cost, capped rather than infinite.
  const LinkFit flat = fit_alpha_beta(std::vector<LatencySample>{{8, 5e-6}, {4 << 20, 5e-6}});
  EXPECT_NEAR(flat.alpha_us, 5, 1e-6);
  EXPECT_LE(flat.beta_bytes_per_us, kMaxBetaBytesPerUs);
}

TEST(CostFit, RejectsTooFewSizesAndBadTimes) {
  EXPECT_THROW(fit_alpha_beta(std::vector<LatencySample>{}), Error);
  EXPECT_THROW(fit_alpha_beta(std::vector<LatencySample>{{8, 1e-6}, {8, 2e-6}}), Error);
  EXPECT_THROW(fit_alpha_beta(std::vector<LatencySample>{{8, 1e-6}, {64, -1e-6}}), Error);
  EXPECT_THROW(fit_alpha_beta(std::vector<LatencySample>{{8, 1e-6}, {64, std::nan("")}}), Error);
}

TEST(CostFit, Median) {
  std::vector<double> odd = {5, 1, 3};
  EXPECT_EQ(median(odd), 3);
  std::vector<double> even = {4, 1, 3, 2};
  EXPECT_EQ(median(even), 2.5);
  std::vector<double> none;
  EXPECT_EQ(median(none), 0);
}

}  // namespace
}  // namespace plait::transport
