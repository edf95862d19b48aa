// Every compressor against a scalar reference: what the wire carries, its exact size, the
// error-feedback residual, and the errors for bad parameters and bad wires.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "core/half.h"
#include "plait/compress.h"
#include "plait/error.h"

namespace plait::compress {
namespace {

std::vector<float> gradient(size_t n, uint32_t seed, float spread = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

struct RoundTrip {
  std::vector<std::byte> wire;
  size_t bytes = 0;
  std::vector<float> out;
};

RoundTrip round_trip(const Compressor& c, const std::vector<float>& x, State* state = nullptr) {
  RoundTrip r;
  r.wire.resize(c.max_wire_bytes(x.size()) + 8);
  r.bytes = c.compress(x.data(), x.size(), r.wire.data(), state);
  r.out.assign(x.size(), -777.0f);
  c.decompress(r.wire.data(), r.bytes, r.out.data(), x.size());
  return r;
}

void expect_invalid(const std::function<void()>& call, const std::string& words) {
  try {
    call();
    ADD_FAILURE() << "no error; wanted one saying '" << words << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(CompressNames, RoundTripAndUnknownNamesListTheKnownOnes) {
  for (Method m : kAllMethods) EXPECT_EQ(parse_method(to_string(m)), m);
  expect_invalid([] { parse_method("zip"); }, "fp16, bf16, int8, sign, topk, threshold, randomk, powersgd");
}

TEST(CompressParams, OutOfRangeParametersAreRefusedByName) {
  expect_invalid([] { Compressor::create(Method::kInt8, {.levels = 0}); }, "levels 0");
  expect_invalid([] { Compressor::create(Method::kInt8, {.levels = 128}); }, "levels 128");
  expect_invalid([] { Compressor::create(Method::kSign, {.chunk = 0}); }, "chunk 0");
  expect_invalid([] { Compressor::create(Method::kTopK, {.ratio = 0.0}); }, "ratio");
  expect_invalid([] { Compressor::create(Method::kRandomK, {.ratio = 1.5}); }, "ratio");
  expect_invalid([] { Compressor::create(Method::kThreshold, {.threshold = 0.0f}); }, "threshold");
  expect_invalid([] { Compressor::create(Method::kPowerSgd, {.rank = 0}); }, "rank 0");
  auto topk = Compressor::create(Method::kTopK, {.k = 11});
  std::vector<float> x(10, 1.0f);
  std::vector<std::byte> wire(1024);
  expect_invalid([&] { topk->compress(x.data(), x.size(), wire.data(), nullptr); }, "larger than the tensor");
}

TEST(CompressCast, Fp16AndBf16MatchTheScalarCastsAndKeepTheRoundingError) {
  auto x = gradient(1001, 1, 3.0f);
  x[0] = 70000.0f;  // beyond half's range: inf
  x[1] = 1e-8f;     // a half subnormal
  for (Method m : {Method::kFp16, Method::kBf16}) {
    auto c = Compressor::create(m);
    EXPECT_EQ(c->max_wire_bytes(x.size()), 2 * x.size());
    State state;
    RoundTrip r = round_trip(*c, x, &state);
    EXPECT_EQ(r.bytes, 2 * x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = m == Method::kFp16 ? half_to_float(float_to_half(x[i]))
                                            : bf16_to_float(float_to_bf16(x[i]));
      ASSERT_EQ(r.out[i], want) << to_string(m) << " value " << i;
      if (std::isfinite(want)) {
        ASSERT_EQ(state.residual[i], x[i] - want) << to_string(m) << " value " << i;
      }
    }
    // accumulate adds to what is there.
    std::vector<float> acc(x.size(), 1.0f);
    c->decompress(r.wire.data(), r.bytes, acc.data(), acc.size(), true);
    EXPECT_EQ(acc[5], 1.0f + r.out[5]);
  }
}

TEST(CompressInt8, ValuesStayWithinOneStepAndRoundingIsUnbiased) {
  const Params p{.levels = 15, .chunk = 100};
  auto c = Compressor::create(Method::kInt8, p);
  const auto x = gradient(1050, 2);
  EXPECT_EQ(c->max_wire_bytes(x.size()), 11 * 4 + x.size());
  RoundTrip r = round_trip(*c, x);
  EXPECT_EQ(r.bytes, 11 * 4 + x.size());
  for (size_t chunk = 0; chunk < 11; ++chunk) {
    const size_t lo = chunk * 100, hi = std::min<size_t>(lo + 100, x.size());
    float scale = 0;
    for (size_t i = lo; i < hi; ++i) scale = std::max(scale, std::fabs(x[i]));
    const float step = scale / 15;
    for (size_t i = lo; i < hi; ++i) {
      ASSERT_LE(std::fabs(r.out[i] - x[i]), step * 1.0001f) << i;
      const float level = r.out[i] / step;
      ASSERT_NEAR(level, std::round(level), 1e-3) << i;  // on the grid
    }
  }
  // Averaged over many draws, the rounding is unbiased.
  std::vector<double> mean(x.size());
  const int draws = 2000;
  for (int d = 0; d < draws; ++d) {
    std::vector<std::byte> wire(c->max_wire_bytes(x.size()));
    std::vector<float> out(x.size());
    State fresh{.calls = static_cast<uint64_t>(d)};  // new noise per draw, no feedback
    const size_t bytes = c->compress(x.data(), x.size(), wire.data(), &fresh);
    c->decompress(wire.data(), bytes, out.data(), out.size());
    for (size_t i = 0; i < x.size(); ++i) mean[i] += out[i] / draws;
  }
  for (size_t i = 0; i < x.size(); i += 7) EXPECT_NEAR(mean[i], x[i], 0.05) << i;
}

TEST(CompressSign, SignsAndChunkMeansWithByteAlignedChunks) {
  const Params p{.chunk = 13};
  auto c = Compressor::create(Method::kSign, p);
  const auto x = gradient(100, 3);
  // 7 whole chunks of 13 (2 bytes of bits each) and one of 9 (2 bytes).
  EXPECT_EQ(c->max_wire_bytes(x.size()), 8 * 4 + 7 * 2 + 2);
  State state;
  RoundTrip r = round_trip(*c, x, &state);
  for (size_t chunk = 0; chunk < 8; ++chunk) {
    const size_t lo = chunk * 13, hi = std::min<size_t>(lo + 13, x.size());
    double sum = 0;
    for (size_t i = lo; i < hi; ++i) sum += std::fabs(x[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(hi - lo));
    for (size_t i = lo; i < hi; ++i) {
      ASSERT_NEAR(std::fabs(r.out[i]), mean, 1e-5f) << i;
      ASSERT_EQ(r.out[i] < 0, x[i] < 0) << i;
      ASSERT_EQ(state.residual[i], x[i] - r.out[i]) << i;
    }
  }
}

TEST(CompressTopK, TheKLargestMagnitudesInIndexOrderOnBothSelectionPaths) {
  for (size_t n : {size_t{1000}, size_t{1} << 20}) {  // every value ranked; sampled threshold
    const size_t k = n / 100;
    auto c = Compressor::create(Method::kTopK, {.k = k});
    const auto x = gradient(n, 4);
    State state;
    RoundTrip r = round_trip(*c, x, &state);
    ASSERT_EQ(r.bytes, 8 * k);
    std::vector<float> mags(n);
    for (size_t i = 0; i < n; ++i) mags[i] = std::fabs(x[i]);
    std::nth_element(mags.begin(), mags.begin() + static_cast<long>(k - 1), mags.end(), std::greater<float>());
    const float kth = mags[k - 1];
    uint32_t last = 0;
    for (size_t e = 0; e < k; ++e) {
      uint32_t index;
      std::memcpy(&index, r.wire.data() + 8 * e, 4);
      ASSERT_TRUE(e == 0 || index > last) << "entries in index order";
      last = index;
    }
    size_t sent = 0;
    for (size_t i = 0; i < n; ++i) {
      if (r.out[i] != 0.0f) {
        ++sent;
        ASSERT_GE(std::fabs(x[i]), kth) << i;
        ASSERT_EQ(r.out[i], x[i]);
        ASSERT_EQ(state.residual[i], 0.0f);
      } else {
        ASSERT_LE(std::fabs(x[i]), kth) << i;
        ASSERT_EQ(state.residual[i], x[i]);
      }
    }
    EXPECT_EQ(sent, k) << n;
  }
  // Ties: exactly k of them, the first ones.
  auto c = Compressor::create(Method::kTopK, {.k = 3});
  RoundTrip r = round_trip(*c, std::vector<float>(10, 2.0f));
  EXPECT_EQ(r.bytes, 24u);
  EXPECT_EQ(r.out, (std::vector<float>{2, 2, 2, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(CompressThreshold, EveryValueAtOrAboveTheThresholdAndABadWireChangesNothing) {
  auto c = Compressor::create(Method::kThreshold, {.threshold = 1.5f});
  const auto x = gradient(5000, 5);
  RoundTrip r = round_trip(*c, x);
  size_t want = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool big = std::fabs(x[i]) >= 1.5f;
    want += big;
    ASSERT_EQ(r.out[i], big ? x[i] : 0.0f) << i;
  }
  EXPECT_EQ(r.bytes, 8 * want);
  EXPECT_GT(want, 0u);
  // An entry past the end: refused before anything is written.
  std::vector<std::byte> bad = r.wire;
  const uint32_t past = 5000;
  std::memcpy(bad.data() + 8 * (want - 1), &past, 4);
  std::vector<float> out(x.size(), 9.0f);
  expect_invalid([&] { c->decompress(bad.data(), r.bytes, out.data(), out.size()); }, "names value 5000");
  EXPECT_EQ(out, std::vector<float>(x.size(), 9.0f));
}

TEST(CompressRandomK, OneValuePerStratumAndRanksWithTheSameSeedDrawTheSameIndices) {
  const size_t n = 1000, k = 37;
  auto a = Compressor::create(Method::kRandomK, {.k = k});
  auto b = Compressor::create(Method::kRandomK, {.k = k});
  auto x = gradient(n, 6);
  State sa, sb;
  RoundTrip ra = round_trip(*a, x, &sa);
  RoundTrip rb = round_trip(*b, gradient(n, 7), &sb);
  EXPECT_EQ(ra.bytes, 8 + 4 * k);
  for (size_t j = 0; j < k; ++j) {
    size_t hits = 0;
    for (size_t i = j * n / k; i < (j + 1) * n / k; ++i) {
      if (ra.out[i] != 0.0f) {
        ++hits;
        EXPECT_EQ(ra.out[i], x[i]);
        EXPECT_EQ(sa.residual[i], 0.0f);
        EXPECT_NE(rb.out[i], 0.0f) << "the other rank drew value " << i << " too";
      }
    }
    EXPECT_EQ(hits, 1u) << "stratum " << j;
  }
  // The next call draws anew.
  RoundTrip again = round_trip(*a, x, &sa);
  EXPECT_NE(std::memcmp(again.wire.data(), ra.wire.data(), 8), 0);
}

TEST(CompressPowerSgd, RecoversAMatrixOfTheSameRankAndKeepsItsQ) {
  const size_t rows = 40, cols = 30, r = 2;
  std::vector<float> m(rows * cols);
  const auto u = gradient(rows * r, 8), v = gradient(cols * r, 9);
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j)
      for (size_t c = 0; c < r; ++c) m[i * cols + j] += u[i * r + c] * v[j * r + c];
  auto pc = Compressor::create(Method::kPowerSgd, {.rank = 2, .rows = rows});
  EXPECT_EQ(pc->max_wire_bytes(m.size()), 4 * r * (rows + cols));
  State state;
  RoundTrip out = round_trip(*pc, m, &state);
  EXPECT_EQ(out.bytes, 4 * r * (rows + cols));
  float norm = 0;
  for (float x : m) norm = std::max(norm, std::fabs(x));
  for (size_t i = 0; i < m.size(); ++i) {
    ASSERT_NEAR(out.out[i], m[i], 1e-4f * norm) << i;
    ASSERT_NEAR(state.residual[i], m[i] - out.out[i], 1e-5f * norm) << i;
  }
  EXPECT_EQ(state.q.size(), r * cols);
  // A rank larger than the matrix allows is cut to it; a flat tensor of a prime count works.
  auto wide = Compressor::create(Method::kPowerSgd, {.rank = 50});
  RoundTrip prime = round_trip(*wide, gradient(101, 10));
  EXPECT_EQ(prime.bytes, wide->max_wire_bytes(101));
}

// Error feedback loses nothing: after T calls, what the wires carried plus the residual is
// the sum of the inputs, for every method.
TEST(CompressErrorFeedback, WiresPlusResidualAddUpToTheInputsForEveryMethod) {
  const size_t n = 3000;
  for (Method m : kAllMethods) {
    auto c = Compressor::create(m, {.ratio = 0.05, .threshold = 1.0f, .rank = 3});
    State state;
    std::vector<double> sent(n), given(n);
    for (int step = 0; step < 6; ++step) {
      const auto g = gradient(n, 100 + static_cast<uint32_t>(step));
      RoundTrip r = round_trip(*c, g, &state);
      for (size_t i = 0; i < n; ++i) {
        sent[i] += r.out[i];
        given[i] += g[i];
      }
    }
    EXPECT_EQ(state.calls, 6u);
    double worst = 0;
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(sent[i] + state.residual[i] - given[i]));
    EXPECT_LT(worst, 1e-3) << to_string(m);
  }
}

TEST(CompressErrors, AWireOfTheWrongSizeOrAStateOfAnotherTensorIsRefused) {
  auto c = Compressor::create(Method::kInt8);
  std::vector<float> x(100, 1.0f), out(100, 5.0f);
  std::vector<std::byte> wire(c->max_wire_bytes(100));
  const size_t bytes = c->compress(x.data(), 100, wire.data(), nullptr);
  expect_invalid([&] { c->decompress(wire.data(), bytes - 1, out.data(), 100); }, "does not hold 100 values");
  EXPECT_EQ(out, std::vector<float>(100, 5.0f));
  State state;
  c->compress(x.data(), 100, wire.data(), &state);
  expect_invalid([&] { c->compress(x.data(), 50, wire.data(), &state); }, "one State per tensor");
}

}  // namespace
}  // namespace plait::compress
