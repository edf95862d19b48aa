// compress::allreduce on real ranks, 2 to 5 of them, every method: every rank ends with the
// same values; they are what the ranks' compressed values carry, reduced (exactly, for the
// methods moved by allgather or as one sum of shared-index values); and error feedback keeps
// the books: the sum of the inputs less the sum of the residuals is the ranks' count times
// the mean, for every method.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "plait/plait.h"
#include "support/job.h"
#include "support/rank_checks.h"

namespace plait::testing {
namespace {

using namespace std::chrono_literals;

std::vector<float> gradient(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

int compressed_child() {
  simulate_hosts();
  auto comm = Communicator::create(bootstrap_from_env(30s));
  const int me = comm->rank(), W = comm->size();
  const size_t n = 5000;  // 50 x 100 for PowerSGD
  const compress::Params params{.chunk = 256, .ratio = 0.05, .threshold = 1.2f, .rank = 3, .rows = 50};
  for (compress::Method m : compress::kAllMethods) {
    const char* name = compress::to_string(m).data();
    auto c = compress::Compressor::create(m, params);
    // Three steps with error feedback (PowerSGD warm-starts from the last Q).
    compress::State state;
    std::vector<float> mean;
    for (int step = 0; step < 3; ++step) {
      mean = gradient(n, static_cast<uint32_t>(1000 * step + me));
      const auto stats = compress::allreduce(*comm, mean.data(), n, *c, &state);
      CHECK_OR_FAIL(stats.wire_bytes > 0 && !stats.path.empty(), "%s: stats", name);
    }
    // Every rank holds the same values.
    std::vector<float> all(n * static_cast<size_t>(W));
    comm->allgather(mean.data(), all.data(), n, DataType::kF32)->wait();
    for (int r = 0; r < W; ++r)
      CHECK_OR_FAIL(std::memcmp(all.data() + r * n, mean.data(), n * 4) == 0, "%s: rank %d differs", name, r);
    // The books of one step from a fresh state: inputs less residuals, summed over the
    // ranks, are W times the mean.
    compress::State fresh;
    auto g = gradient(n, static_cast<uint32_t>(77 + me));
    std::vector<float> out = g;
    auto c2 = compress::Compressor::create(m, params);
    compress::allreduce(*comm, out.data(), n, *c2, &fresh);
    std::vector<float> kept(n);
    for (size_t i = 0; i < n; ++i) kept[i] = g[i] - fresh.residual[i];
    comm->allreduce(kept.data(), kept.data(), n, DataType::kF32, ReduceOp::kSum)->wait();
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(kept[i] - static_cast<float>(W) * out[i])));
      scale = std::max(scale, std::fabs(static_cast<double>(kept[i])));
    }
    // fp16 and bf16 sum in 16 bits: their books balance to the format's rounding.
    const double tolerance = m == compress::Method::kBf16 ? 2e-2 * scale
                             : m == compress::Method::kFp16 ? 2e-3 * scale
                                                            : 1e-4 * scale + 1e-5;
    CHECK_OR_FAIL(worst <= tolerance, "%s: inputs - residuals differ from %d x mean by %g (scale %g)", name, W,
                  worst, scale);
    // The gathered and shared-index methods: exactly the mean of the decompressed wires, in
    // rank order, as this rank recomputes them from every rank's input.
    if (m == compress::Method::kSign || m == compress::Method::kTopK || m == compress::Method::kThreshold ||
        m == compress::Method::kRandomK) {
      std::vector<float> want(n, 0.0f);
      for (int r = 0; r < W; ++r) {
        auto cr = compress::Compressor::create(m, params);
        compress::State sr;
        const auto gr = gradient(n, static_cast<uint32_t>(77 + r));
        std::vector<std::byte> wire(cr->max_wire_bytes(n));
        const size_t bytes = cr->compress(gr.data(), n, wire.data(), &sr);
        cr->decompress(wire.data(), bytes, want.data(), n, true);
      }
      for (size_t i = 0; i < n; ++i) want[i] *= 1.0f / static_cast<float>(W);
      if (m == compress::Method::kRandomK) {
        // One allreduce sums the k values: the order of the additions is the collective's.
        for (size_t i = 0; i < n; ++i)
          CHECK_OR_FAIL(std::fabs(out[i] - want[i]) <= 1e-5f * (1 + std::fabs(want[i])), "%s: value %zu", name, i);
      } else {
        CHECK_OR_FAIL(std::memcmp(out.data(), want.data(), n * 4) == 0, "%s: not the exact sum of the wires", name);
      }
    }
  }
  std::printf("rank %d: compressed allreduce ok\n", me);
  return 0;
}

ChildMode compressed_mode("compressed_allreduce", compressed_child);

// AutoCompression: every rank makes the same choice at every size, the least predicted one;
// its allreduce is that method's compressed allreduce (or a plain f32 mean), bit for bit;
// `force` overrides the model; a force that is not a candidate is invalid usage.
int auto_child() {
  simulate_hosts();
  auto comm = Communicator::create(bootstrap_from_env(30s));
  const int me = comm->rank(), W = comm->size();
  using compress::Method;
  const compress::AutoOptions options{.candidates = {Method::kFp16, Method::kPowerSgd, Method::kTopK},
                                      .params = {.ratio = 0.05, .rank = 2}};
  const auto chooser = compress::AutoCompression::measure(*comm, options);
  CHECK_OR_FAIL(chooser.alpha_seconds() > 0 && chooser.bytes_per_second() > 0, "link not measured");
  for (Method m : options.candidates) CHECK_OR_FAIL(chooser.speed(m) > 0, "%s: no speed", compress::to_string(m).data());
  for (size_t n : {size_t{16}, size_t{5000}, size_t{1} << 20}) {
    const std::optional<Method> choice = chooser.choose(n);
    int32_t code = choice ? static_cast<int32_t>(*choice) : -1;
    std::vector<int32_t> codes(static_cast<size_t>(W));
    comm->allgather(&code, codes.data(), 1, DataType::kI32)->wait();
    for (int r = 0; r < W; ++r) CHECK_OR_FAIL(codes[static_cast<size_t>(r)] == code, "n=%zu: rank %d chose otherwise", n, r);
    // The cheapest candidate, if it is within the margin of the uncompressed allreduce.
    const double none_s = chooser.predict(std::nullopt, n);
    for (Method m : options.candidates) {
      const double t = chooser.predict(m, n);
      if (choice)
        CHECK_OR_FAIL(chooser.predict(choice, n) <= t && chooser.predict(choice, n) <= compress::AutoCompression::kMargin * none_s,
                      "n=%zu: %s chosen over %s", n, compress::to_string(*choice).data(), compress::to_string(m).data());
      else
        CHECK_OR_FAIL(t > compress::AutoCompression::kMargin * none_s, "n=%zu: %s was within the margin", n,
                      compress::to_string(m).data());
    }
    // The same values as the chosen path run by hand.
    const auto g = gradient(n, static_cast<uint32_t>(500 + me));
    std::vector<float> got = g, want = g;
    compress::State state, by_hand;
    const auto stats = chooser.allreduce(*comm, got.data(), n, &state);
    CHECK_OR_FAIL(stats.path.rfind("auto: ", 0) == 0, "n=%zu: path '%s'", n, stats.path.c_str());
    if (choice) {
      auto c = compress::Compressor::create(*choice, options.params);
      compress::allreduce(*comm, want.data(), n, *c, &by_hand);
    } else {
      comm->allreduce(want.data(), want.data(), n, DataType::kF32, ReduceOp::kSum)->wait();
      for (float& x : want) x *= 1.0f / static_cast<float>(W);
    }
    CHECK_OR_FAIL(std::memcmp(got.data(), want.data(), n * 4) == 0, "n=%zu: not the chosen path's result", n);
  }
  // Forced: always that method, whatever the model says.
  auto forced_options = options;
  forced_options.force = "topk";
  const auto forced = compress::AutoCompression::measure(*comm, forced_options);
  CHECK_OR_FAIL(forced.choose(16) == Method::kTopK && forced.choose(1 << 20) == Method::kTopK, "force topk ignored");
  std::vector<float> v = gradient(5000, 9);
  CHECK_OR_FAIL(forced.allreduce(*comm, v.data(), v.size(), nullptr).path.rfind("auto: topk, allgather", 0) == 0,
                "forced path");
  forced_options.force = "none";
  CHECK_OR_FAIL(!compress::AutoCompression::measure(*comm, forced_options).choose(1 << 20), "force none ignored");
  for (const char* bad : {"int8", "zip"}) {
    forced_options.force = bad;
    try {
      (void)compress::AutoCompression::measure(*comm, forced_options);
      CHECK_OR_FAIL(false, "force=%s accepted", bad);
    } catch (const Error& e) {
      CHECK_OR_FAIL(e.category() == ErrorCategory::kInvalidUsage, "force=%s: %s", bad, e.what());
    }
  }
  std::printf("rank %d: compress auto ok\n", me);
  return 0;
}

ChildMode auto_mode("compress_auto", auto_child);

class CompressedAllreduce : public ::testing::TestWithParam<int> {};

// int8 at many ranks: every rank's values are the chunk's scale, so each quantum is the top
// level and the sum of the quanta is ranks x levels, the largest the wire must hold. The mean
// is then 1 (to the f32 rounding of the scale / levels step). (Up to 127 ranks int8 holds it; at 128 the int8 sum of 1 level wrapped:
// the mean came back as -1.)
int int8_many_child() {
  auto comm = Communicator::create(bootstrap_from_env(60s));
  auto c = compress::Compressor::create(compress::Method::kInt8, {});
  std::vector<float> v(3000, 1.0f);
  v[7] = -1.0f;
  const auto stats = compress::allreduce(*comm, v.data(), v.size(), *c, nullptr, true);
  for (size_t i = 0; i < v.size(); ++i)
    CHECK_OR_FAIL(std::fabs(v[i] - (i == 7 ? -1.0f : 1.0f)) < 1e-5f, "value %zu is %g after %s", i, static_cast<double>(v[i]),
                  stats.path.c_str());
  if (comm->rank() == 0) std::printf("int8 at %d ranks: %s\n", comm->size(), stats.path.c_str());
  std::printf("int8 many ok\n");
  return 0;
}
ChildMode int8_many_mode("compress_int8_many", int8_many_child);

TEST(CompressedAllreduceInt8, TheSumOfTheTopLevelFitsAt130Ranks) {
  JobResult r = run_job(130, "compress_int8_many", {{"PLAIT_TIMEOUT", "120000"}}, 600);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "int8 many ok"), 130u) << r.output;
  EXPECT_NE(r.output.find("int8 at 130 ranks: allreduce i16 pairs in i32 (127 levels)"), std::string::npos)
      << r.output;
}

TEST_P(CompressedAllreduce, EveryMethodAgreesKeepsItsBooksAndIsTheSumOfTheWires) {
  const int ranks = GetParam();
  JobResult r = run_job(ranks, "compressed_allreduce", {{"PLAIT_TIMEOUT", "60000"}, {"PLAIT_TEST_HOSTS", "2"}}, 300);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "compressed allreduce ok"), static_cast<size_t>(ranks)) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Ranks, CompressedAllreduce, ::testing::Values(2, 3, 5),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

class CompressAuto : public ::testing::TestWithParam<int> {};

TEST_P(CompressAuto, EveryRankChoosesTheLeastPredictedPathAndRunsIt) {
  const int ranks = GetParam();
  JobResult r = run_job(ranks, "compress_auto", {{"PLAIT_TIMEOUT", "60000"}, {"PLAIT_TEST_HOSTS", "2"}}, 300);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "compress auto ok"), static_cast<size_t>(ranks)) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Ranks, CompressAuto, ::testing::Values(2, 3),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

}  // namespace
}  // namespace plait::testing
