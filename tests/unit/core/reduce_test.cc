// Every reduction kernel variant this CPU can run, against a scalar reference written here:
// all dtypes x ops x ISA levels x awkward counts, aliasing, scale_divide and the NaN rules.
#include "core/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "core/reduce_dispatch.h"
#include "plait/error.h"

namespace plait {

void PrintTo(IsaLevel level, std::ostream* out) { *out << to_string(level); }

namespace {

constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 1023, 4099};
constexpr ReduceOp kCombineOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                                    ReduceOp::kAvg};
constexpr size_t kGuardBytes = 64;
constexpr uint8_t kGuardByte = 0xa5;

// --- the scalar reference: the semantics reduce_kernels.h documents.

template <typename T>
T ref_combine(ReduceOp op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case ReduceOp::kProd:
        return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case ReduceOp::kMin:
        return a < b ? a : b;
      case ReduceOp::kMax:
        return a > b ? a : b;
    }
  } else {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return a + b;
      case ReduceOp::kProd:
        return a * b;
      case ReduceOp::kMin:
        return std::isnan(a) ? a : (a < b ? a : b);
      case ReduceOp::kMax:
        return std::isnan(a) ? a : (a > b ? a : b);
    }
  }
  return a;
}

template <typename T>
T ref_divide(T x, int divisor) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    if (divisor == -1) return static_cast<T>(static_cast<U>(U{0} - static_cast<U>(x)));
    return static_cast<T>(static_cast<int64_t>(x) / divisor);
  } else {
    return x / static_cast<T>(divisor);
  }
}

template <typename T>
void ref_combine_array(ReduceOp op, void* dst, const void* a, const void* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    T x, y;
    std::memcpy(&x, static_cast<const T*>(a) + i, sizeof x);
    std::memcpy(&y, static_cast<const T*>(b) + i, sizeof y);
    T r = ref_combine(op, x, y);
    std::memcpy(static_cast<T*>(dst) + i, &r, sizeof r);
  }
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void ref_combine_16(ReduceOp op, void* dst, const void* a, const void* b, size_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = Narrow(ref_combine(op, Widen(x[i]), Widen(y[i])));
}

void ref_reduce(DataType t, ReduceOp op, void* dst, const void* a, const void* b, size_t n) {
  switch (t) {
    case DataType::kF32:
      return ref_combine_array<float>(op, dst, a, b, n);
    case DataType::kF64:
      return ref_combine_array<double>(op, dst, a, b, n);
    case DataType::kF16:
      return ref_combine_16<half_to_float, float_to_half>(op, dst, a, b, n);
    case DataType::kBF16:
      return ref_combine_16<bf16_to_float, float_to_bf16>(op, dst, a, b, n);
    case DataType::kI8:
      return ref_combine_array<int8_t>(op, dst, a, b, n);
    case DataType::kU8:
      return ref_combine_array<uint8_t>(op, dst, a, b, n);
    case DataType::kI32:
      return ref_combine_array<int32_t>(op, dst, a, b, n);
    case DataType::kI64:
      return ref_combine_array<int64_t>(op, dst, a, b, n);
  }
}

template <typename T>
void ref_divide_array(void* data, size_t n, int divisor) {
  auto* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = ref_divide(p[i], divisor);
}

void ref_scale_divide(DataType t, void* data, size_t n, int divisor) {
  auto* h = static_cast<uint16_t*>(data);
  switch (t) {
    case DataType::kF32:
      return ref_divide_array<float>(data, n, divisor);
    case DataType::kF64:
      return ref_divide_array<double>(data, n, divisor);
    case DataType::kF16:
      for (size_t i = 0; i < n; ++i) h[i] = float_to_half(half_to_float(h[i]) / divisor);
      return;
    case DataType::kBF16:
      for (size_t i = 0; i < n; ++i) h[i] = float_to_bf16(bf16_to_float(h[i]) / divisor);
      return;
    case DataType::kI8:
      return ref_divide_array<int8_t>(data, n, divisor);
    case DataType::kU8:
      return ref_divide_array<uint8_t>(data, n, divisor);
    case DataType::kI32:
      return ref_divide_array<int32_t>(data, n, divisor);
    case DataType::kI64:
      return ref_divide_array<int64_t>(data, n, divisor);
  }
}

// --- inputs: random values with the special cases mixed in. NaN inputs only where the result
// is fully defined (min/max, divide): which of two NaNs a sum returns is up to the hardware.

bool is_nan_bits(DataType t, uint64_t bits) {
  switch (t) {
    case DataType::kF16:
      return (bits & 0x7fffu) > 0x7c00u;
    case DataType::kBF16:
      return (bits & 0x7fffu) > 0x7f80u;
    default:
      return false;
  }
}

template <typename F>
F random_float(std::mt19937_64& rng, bool allow_nan) {
  switch (rng() % 16) {
    case 0:
      return 0;
    case 1:
      return -F(0);
    case 2:
      return std::numeric_limits<F>::infinity();
    case 3:
      return -std::numeric_limits<F>::infinity();
    case 4:
      return std::numeric_limits<F>::denorm_min() * static_cast<F>(rng() % 1000);
    case 5:
      return std::numeric_limits<F>::max() / static_cast<F>(1 + rng() % 3);
    case 6:
      if (allow_nan) return std::numeric_limits<F>::quiet_NaN();
      return 1;
    default:
      return std::uniform_real_distribution<F>(-1000, 1000)(rng);
  }
}

std::vector<uint8_t> random_values(DataType t, size_t count, uint64_t seed, bool allow_nan) {
  std::mt19937_64 rng(seed);
  const size_t size = dtype_size(t);
  std::vector<uint8_t> out(count * size);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* p = out.data() + i * size;
    if (t == DataType::kF32) {
      float f = random_float<float>(rng, allow_nan);
      std::memcpy(p, &f, size);
    } else if (t == DataType::kF64) {
      double d = random_float<double>(rng, allow_nan);
      std::memcpy(p, &d, size);
    } else {
      uint64_t bits = rng();
      while (!allow_nan && is_nan_bits(t, bits)) bits = rng();
      std::memcpy(p, &bits, size);
    }
  }
  return out;
}

std::string label(IsaLevel isa, DataType t, ReduceOp op, size_t count) {
  return std::string(to_string(isa)) + " " + std::string(to_string(t)) + " " +
         std::string(to_string(op)) + " count " + std::to_string(count);
}

// dst is checked to the byte, and the guard bytes after it must be untouched.
void expect_same(const std::vector<uint8_t>& want, const std::vector<uint8_t>& got, size_t size,
                 const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != got[i]) {
      FAIL() << what << ": first difference in element " << i / size << " (byte " << i << ")";
    }
  }
}

class ReduceIsa : public ::testing::TestWithParam<IsaLevel> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << to_string(GetParam());
  }
};

enum class Aliasing { kNone, kDstIsA, kDstIsB };

TEST_P(ReduceIsa, EveryDtypeOpAndCountMatchesScalarReference) {
  const IsaLevel isa = GetParam();
  uint64_t seed = 1;
  for (DataType t : kAllDataTypes) {
    const size_t size = dtype_size(t);
    for (ReduceOp op : kCombineOps) {
      const bool allow_nan = op == ReduceOp::kMin || op == ReduceOp::kMax;
      for (size_t count : kCounts) {
        for (Aliasing aliasing : {Aliasing::kNone, Aliasing::kDstIsA, Aliasing::kDstIsB}) {
          // One element of offset on odd counts puts the arrays off vector alignment.
          const size_t offset = (count % 2) * size;
          const size_t bytes = count * size;
          auto a = random_values(t, count, ++seed, allow_nan);
          auto b = random_values(t, count, ++seed, allow_nan);
          std::vector<uint8_t> want(bytes + kGuardBytes, kGuardByte);
          ref_reduce(t, op, want.data(), a.data(), b.data(), count);

          std::vector<uint8_t> buf_a(offset + bytes), buf_b(offset + bytes);
          std::vector<uint8_t> buf_d(offset + bytes + kGuardBytes, kGuardByte);
          std::copy(a.begin(), a.end(), buf_a.begin() + offset);
          std::copy(b.begin(), b.end(), buf_b.begin() + offset);
          uint8_t* pa = buf_a.data() + offset;
          uint8_t* pb = buf_b.data() + offset;
          uint8_t* pd = buf_d.data() + offset;
          if (aliasing == Aliasing::kDstIsA) pd = pa;
          if (aliasing == Aliasing::kDstIsB) pd = pb;
          reduce_into_isa(isa, t, op, pd, pa, pb, count);

          std::vector<uint8_t> got(pd, pd + bytes);
          if (aliasing == Aliasing::kNone) {
            got.insert(got.end(), pd + bytes, pd + bytes + kGuardBytes);
          } else {
            got.insert(got.end(), kGuardBytes, kGuardByte);
          }
          expect_same(
              want, got, size,
              label(isa, t, op, count) + " aliasing " + std::to_string(static_cast<int>(aliasing)));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST_P(ReduceIsa, ScaleDivideMatchesScalarReference) {
  const IsaLevel isa = GetParam();
  uint64_t seed = 1000;
  for (DataType t : kAllDataTypes) {
    for (int divisor : {1, 2, 3, 7, 1000, -1, -3, std::numeric_limits<int>::min()}) {
      for (size_t count : kCounts) {
        auto data = random_values(t, count, ++seed, /*allow_nan=*/false);
        auto want = data;
        ref_scale_divide(t, want.data(), count, divisor);
        scale_divide_isa(isa, t, data.data(), count, divisor);
        expect_same(want, data, dtype_size(t),
                    label(isa, t, ReduceOp::kAvg, count) + " divisor " + std::to_string(divisor));
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(ReduceIsa, ScaleDivideIntegerExtremes) {
  const IsaLevel isa = GetParam();
  std::vector<int32_t> i32 = {INT32_MIN, INT32_MIN + 1, INT32_MAX, -7, 7, 0, -1, 1, 16777217};
  std::vector<int8_t> i8 = {-128, 127, -1, 1, 0, -7, 7};
  for (int divisor : {1, -1, 2, -2, 3, 5, 127, -128, INT32_MAX, INT32_MIN}) {
    auto want32 = i32, got32 = i32;
    ref_scale_divide(DataType::kI32, want32.data(), want32.size(), divisor);
    scale_divide_isa(isa, DataType::kI32, got32.data(), got32.size(), divisor);
    EXPECT_EQ(want32, got32) << "i32 divisor " << divisor;
    auto want8 = i8, got8 = i8;
    ref_scale_divide(DataType::kI8, want8.data(), want8.size(), divisor);
    scale_divide_isa(isa, DataType::kI8, got8.data(), got8.size(), divisor);
    EXPECT_EQ(want8, got8) << "i8 divisor " << divisor;
  }
  std::vector<int64_t> i64 = {INT64_MIN, INT64_MAX, -5};
  scale_divide_isa(isa, DataType::kI64, i64.data(), i64.size(), -1);
  EXPECT_EQ(i64, (std::vector<int64_t>{INT64_MIN, -INT64_MAX, 5}));
}

// Every f16 bit pattern through the kernel's conversions: max(x, x) is x, NaNs come back
// quiet with sign and payload kept, as float_to_half(half_to_float(x)) does.
TEST_P(ReduceIsa, EveryHalfPatternSurvivesTheKernelConversions) {
  std::vector<uint16_t> all(65536), out(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    reduce_into_isa(GetParam(), t, ReduceOp::kMax, out.data(), all.data(), all.data(), all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      uint16_t want = is_nan_bits(t, i)
                          ? static_cast<uint16_t>(i | (t == DataType::kF16 ? 0x200 : 0x40))
                          : static_cast<uint16_t>(i);
      ASSERT_EQ(out[i], want) << to_string(t) << " pattern " << i;
    }
  }
}

// Every 16-bit pattern times a few scales puts products into every rounding regime (normal,
// subnormal, overflow, exact ties) of the kernel's f32 -> f16/bf16 narrowing.
TEST_P(ReduceIsa, EveryPatternTimesScalesRoundsLikeTheScalarConversion) {
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    const std::vector<uint16_t> scales =
        t == DataType::kF16
            ? std::vector<uint16_t>{0x3555, 0x0001, 0x1400, 0x3c01, 0x5bff, 0x7bff, 0xb801}
            : std::vector<uint16_t>{0x3eab, 0x0001, 0x3f81, 0x7f7f, 0x00ff, 0xbf01};
    std::vector<uint16_t> a, b;
    for (uint16_t scale : scales) {
      for (uint32_t i = 0; i < 65536; ++i) {
        if (is_nan_bits(t, i)) continue;
        a.push_back(static_cast<uint16_t>(i));
        b.push_back(scale);
      }
    }
    std::vector<uint16_t> want(a.size()), got(a.size());
    ref_reduce(t, ReduceOp::kProd, want.data(), a.data(), b.data(), a.size());
    reduce_into_isa(GetParam(), t, ReduceOp::kProd, got.data(), a.data(), b.data(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << to_string(t) << " " << a[i] << " * " << b[i];
    }
  }
}

TEST_P(ReduceIsa, FloatMinMaxNanAndSignedZeroRules) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> a = {nan, 1.0f, nan, 0.0f, -0.0f, 2.0f};
  const std::vector<float> b = {1.0f, nan, nan, -0.0f, 0.0f, 3.0f};
  std::vector<float> mn(a.size()), mx(a.size()), sum(a.size());
  reduce_into_isa(GetParam(), DataType::kF32, ReduceOp::kMin, mn.data(), a.data(), b.data(),
                  a.size());
  reduce_into_isa(GetParam(), DataType::kF32, ReduceOp::kMax, mx.data(), a.data(), b.data(),
                  a.size());
  reduce_into_isa(GetParam(), DataType::kF32, ReduceOp::kSum, sum.data(), a.data(), b.data(),
                  a.size());
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(std::isnan(mn[i])) << i;
    EXPECT_TRUE(std::isnan(mx[i])) << i;
    EXPECT_TRUE(std::isnan(sum[i])) << i;
  }
  // Equal operands give b.
  EXPECT_TRUE(std::signbit(mn[3]));
  EXPECT_FALSE(std::signbit(mn[4]));
  EXPECT_TRUE(std::signbit(mx[3]));
  EXPECT_EQ(mn[5], 2.0f);
  EXPECT_EQ(mx[5], 3.0f);
}

TEST_P(ReduceIsa, IntegerSumAndProdWrap) {
  std::vector<int32_t> a = {INT32_MAX, INT32_MIN, 65536};
  std::vector<int32_t> b = {1, -1, 65536};
  std::vector<int32_t> s(3), p(3);
  reduce_into_isa(GetParam(), DataType::kI32, ReduceOp::kSum, s.data(), a.data(), b.data(), 3);
  reduce_into_isa(GetParam(), DataType::kI32, ReduceOp::kProd, p.data(), a.data(), b.data(), 3);
  EXPECT_EQ(s, (std::vector<int32_t>{INT32_MIN, INT32_MAX, 131072}));
  EXPECT_EQ(p, (std::vector<int32_t>{INT32_MAX, INT32_MIN, 0}));
}

INSTANTIATE_TEST_SUITE_P(Reduce, ReduceIsa, ::testing::ValuesIn(kAllIsaLevels),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(ReduceDispatch, ActiveLevelIsSupportedAndBaselineAlwaysIs) {
  EXPECT_TRUE(isa_supported(IsaLevel::kBaseline));
  EXPECT_TRUE(isa_supported(active_isa_level()));
}

TEST(ReduceDispatch, PublicEntryPointsMatchTheActiveLevel) {
  auto a = random_values(DataType::kF16, 1000, 7, false);
  auto b = random_values(DataType::kF16, 1000, 8, false);
  std::vector<uint8_t> want(a.size()), got(a.size());
  reduce_into_isa(active_isa_level(), DataType::kF16, ReduceOp::kSum, want.data(), a.data(),
                  b.data(), 1000);
  reduce_into(DataType::kF16, ReduceOp::kAvg, got.data(), a.data(), b.data(), 1000);
  EXPECT_EQ(want, got);
  reduce_inplace(DataType::kF16, ReduceOp::kSum, a.data(), b.data(), 1000);
  EXPECT_EQ(want, a);
  scale_divide(DataType::kF16, a.data(), 1000, 2);
  scale_divide_isa(active_isa_level(), DataType::kF16, want.data(), 1000, 2);
  EXPECT_EQ(want, a);
}

// A few elements are summed without the kernel table (an 8-byte allreduce is mostly that
// call): the results must be the kernels' bit for bit, special values and wrapping included.
TEST(ReduceDispatch, TinyCountsMatchTheKernels) {
  for (DataType dtype : kAllDataTypes) {
    for (size_t count = 1; count <= 9; ++count) {
      auto a = random_values(dtype, count, 11 + static_cast<int>(count), true);
      auto b = random_values(dtype, count, 23 + static_cast<int>(count), true);
      std::vector<uint8_t> want(a.size()), got(a.size());
      reduce_into_isa(IsaLevel::kBaseline, dtype, ReduceOp::kSum, want.data(), a.data(),
                      b.data(), count);
      reduce_into(dtype, ReduceOp::kSum, got.data(), a.data(), b.data(), count);
      EXPECT_EQ(want, got) << to_string(dtype) << " x" << count;
      reduce_inplace(dtype, ReduceOp::kSum, a.data(), b.data(), count);
      EXPECT_EQ(want, a) << to_string(dtype) << " x" << count << " in place";
    }
  }
  const float fa[3] = {std::numeric_limits<float>::infinity(), NAN, -0.0f};
  const float fb[3] = {-std::numeric_limits<float>::infinity(), 1.0f, -0.0f};
  float fw[3], fg[3];
  reduce_into_isa(IsaLevel::kBaseline, DataType::kF32, ReduceOp::kSum, fw, fa, fb, 3);
  reduce_into(DataType::kF32, ReduceOp::kSum, fg, fa, fb, 3);
  EXPECT_EQ(0, std::memcmp(fw, fg, sizeof fw));
  const int64_t ia[2] = {INT64_MAX, INT64_MIN}, ib[2] = {1, -1};
  int64_t ig[2];
  reduce_into(DataType::kI64, ReduceOp::kSum, ig, ia, ib, 2);
  EXPECT_EQ(ig[0], INT64_MIN);
  EXPECT_EQ(ig[1], INT64_MAX);
}

TEST(ReduceDispatch, BadArgumentsThrowInvalidUsage) {
  float x[4] = {};
  auto expect_invalid = [](auto&& call, const char* needle) {
    try {
      call();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInvalidUsage);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_invalid([&] { scale_divide(DataType::kF32, x, 4, 0); }, "divisor is 0");
  expect_invalid([&] { reduce_into(static_cast<DataType>(42), ReduceOp::kSum, x, x, x, 4); },
                 "unknown data type");
  expect_invalid([&] { reduce_into(DataType::kF32, static_cast<ReduceOp>(9), x, x, x, 4); },
                 "unknown reduce op");
  expect_invalid([&] { reduce_inplace(DataType::kF32, ReduceOp::kSum, nullptr, x, 4); },
                 "null buffer");
  reduce_into(DataType::kF32, ReduceOp::kSum, nullptr, nullptr, nullptr, 0);  // nothing to do
  for (IsaLevel level : kAllIsaLevels) {
    if (isa_supported(level)) continue;
    expect_invalid([&] { reduce_into_isa(level, DataType::kF32, ReduceOp::kSum, x, x, x, 4); },
                   "cannot run");
  }
}

}  // namespace
}  // namespace plait
