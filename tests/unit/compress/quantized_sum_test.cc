// The int8 compressed allreduce's sum of quanta (compress/quantized_sum.h) at 2 to 40,000
// ranks: each simulated rank quantises and packs as compress::allreduce does, the wires are
// summed with the reduction kernel the allreduce itself applies (any algorithm's sum is this
// sum: integer addition without overflow does not depend on the order), and the decoded sums
// must be exact. At 128 ranks and more the int8 wire with max(1, 127 / ranks) = 1 level
// wrapped: 128 ranks' +1 summed to -128.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "compress/kernels.h"
#include "compress/quantized_sum.h"
#include "core/reduce.h"

namespace plait::compress::detail {
namespace {

// Rank r's quanta: the extreme +levels or -levels (worst cases), or a spread.
enum class Pattern { kAllMax, kAllMin, kSpread };

int8_t quantum(Pattern pattern, int levels, int rank, size_t i) {
  switch (pattern) {
    case Pattern::kAllMax: return static_cast<int8_t>(levels);
    case Pattern::kAllMin: return static_cast<int8_t>(-levels);
    case Pattern::kSpread: break;
  }
  const int span = 2 * levels + 1;
  return static_cast<int8_t>(static_cast<int>((static_cast<size_t>(rank) * 7919 + i * 104729) % span) - levels);
}

// Sums `ranks` ranks' packed quanta; expects every decoded sum exact.
void expect_exact_sums(int ranks, int asked, Pattern pattern, size_t count) {
  const QuantizedSum plan = plan_quantized_sum(ranks, asked);
  ASSERT_GE(plan.levels, 1);
  ASSERT_LE(plan.levels, asked);
  std::vector<std::byte> sum(plan.bytes(count)), wire(plan.bytes(count));
  std::vector<int8_t> q(count);
  std::vector<int64_t> want(count, 0);
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < count; ++i) {
      q[i] = quantum(pattern, plan.levels, r, i);
      want[i] += q[i];
    }
    pack_quanta(plan, q.data(), count, r == 0 ? sum.data() : wire.data());
    if (r > 0) reduce_inplace(plan.dtype(), ReduceOp::kSum, sum.data(), wire.data(), plan.elements(count));
  }
  std::vector<float> got(count);
  dequantize_sums(plan, sum.data(), 0, count, 1.0f, got.data());
  for (size_t i = 0; i < count; ++i)
    ASSERT_EQ(static_cast<int64_t>(got[i]), want[i])
        << ranks << " ranks, " << plan.describe() << ", value " << i;
  // A range from the middle decodes the same (chunks start anywhere, odd offsets included).
  const size_t first = count / 2 + 1, n = count - first;
  std::vector<float> part(n);
  dequantize_sums(plan, sum.data(), first, n, 0.5f, part.data());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(part[i], 0.5f * static_cast<float>(want[first + i]));
}

TEST(QuantizedSum, ExactAtEveryRankCountForTheExtremeAndSpreadQuanta) {
  for (int ranks : {2, 3, 42, 127, 128, 129, 255, 256, 1000, 4096, 32767, 32768, 40000})
    for (Pattern pattern : {Pattern::kAllMax, Pattern::kAllMin, Pattern::kSpread})
      expect_exact_sums(ranks, 127, pattern, ranks > 4096 ? 9 : 1001);
}

TEST(QuantizedSum, TheNarrowestWireWithTheLevelsItHolds) {
  // Up to 127 ranks int8 keeps what fits; beyond, the wider wires give more levels than one.
  EXPECT_EQ(plan_quantized_sum(1, 127).levels, 127);
  EXPECT_EQ(plan_quantized_sum(4, 127).levels, 31);
  EXPECT_EQ(plan_quantized_sum(4, 8).levels, 8);
  EXPECT_EQ(plan_quantized_sum(127, 127).wire, QuantizedSum::Wire::kI8);
  EXPECT_EQ(plan_quantized_sum(127, 127).levels, 1);
  const QuantizedSum at128 = plan_quantized_sum(128, 127);
  EXPECT_EQ(at128.wire, QuantizedSum::Wire::kI16Pairs);
  EXPECT_EQ(at128.levels, 127);
  EXPECT_EQ(at128.bytes(1001), 2004u);  // 501 words
  EXPECT_EQ(plan_quantized_sum(1024, 127).levels, 31);
  const QuantizedSum huge = plan_quantized_sum(40000, 127);
  EXPECT_EQ(huge.wire, QuantizedSum::Wire::kI32);
  EXPECT_EQ(huge.levels, 127);
}

}  // namespace
}  // namespace plait::compress::detail
