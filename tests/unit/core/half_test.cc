// f16 and bf16 conversions against references computed here independently (exact double
// arithmetic and a search over all representable values), exhaustively where 2^16 allows.
#include "core/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace plait {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool half_is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }

// The value of a finite half, from the format's definition.
double half_value(uint16_t h) {
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  double magnitude = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return (h & 0x8000u) ? -magnitude : magnitude;
}

// Round-to-nearest-even by search: the two representable neighbours of |f| among all
// non-negative halves (inf counts as the even neighbour above 65504).
uint16_t reference_float_to_half(float f) {
  static const std::vector<double> positive = [] {
    std::vector<double> v;
    for (uint32_t h = 0; h < 0x7c00; ++h) v.push_back(half_value(static_cast<uint16_t>(h)));
    return v;
  }();
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double x = std::fabs(static_cast<double>(f));
  auto above = std::upper_bound(positive.begin(), positive.end(), x);
  const uint16_t lo = static_cast<uint16_t>(above - positive.begin() - 1);
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  const double hi_value = hi == 0x7c00 ? 65536.0 : positive[hi];
  const double below = x - positive[lo], over = hi_value - x;
  uint16_t pick = below < over ? lo : over < below ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<uint16_t>(sign | pick);
}

uint16_t reference_float_to_bf16(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t lo = u >> 16, hi = lo + 1;
  const double x = f;
  const double below = std::fabs(x - static_cast<double>(float_of(lo << 16)));
  // The neighbour above the largest finite value is inf: measure it as 2^128.
  const double hi_value = (hi & 0x7fffu) == 0x7f80u ? std::copysign(std::ldexp(1.0, 128), x)
                                                    : static_cast<double>(float_of(hi << 16));
  const double over = std::fabs(hi_value - x);
  return static_cast<uint16_t>(below < over ? lo : over < below ? hi : (lo % 2 == 0 ? lo : hi));
}

TEST(Half, EveryPatternWidensToItsValue) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = half_to_float(h);
    if (half_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << i;
      ASSERT_EQ(bits_of(f), ((i & 0x8000u) << 16) | 0x7f800000u | ((i & 0x3ffu) << 13)) << i;
    } else if ((h & 0x7fffu) == 0x7c00u) {
      ASSERT_TRUE(std::isinf(f)) << i;
      ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << i;
    } else {
      ASSERT_EQ(static_cast<double>(f), half_value(h)) << i;
      ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << i;  // -0 stays -0
    }
  }
}

TEST(Half, EveryPatternRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const uint16_t back = float_to_half(half_to_float(h));
    if (half_is_nan(h)) {
      ASSERT_EQ(back, h | 0x200u) << "NaN comes back quiet with sign and payload, " << i;
    } else {
      ASSERT_EQ(back, h) << i;
    }
  }
}

TEST(Half, HalfwayCasesRoundToEven) {
  for (uint32_t h = 0; h + 1 < 0x7c00; ++h) {
    const double lo = half_value(static_cast<uint16_t>(h));
    const double hi = half_value(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // 12 significant bits: exact
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const uint16_t even = static_cast<uint16_t>(h % 2 == 0 ? h : h + 1);
    ASSERT_EQ(float_to_half(mid), even) << "midpoint after " << h;
    ASSERT_EQ(float_to_half(-mid), even | 0x8000u) << "midpoint after " << h;
    ASSERT_EQ(float_to_half(std::nextafter(mid, 0.0f)), h) << h;
    ASSERT_EQ(float_to_half(std::nextafter(mid, 1e9f)), h + 1) << h;
  }
}

TEST(Half, MatchesNearestEvenSearchAcrossFloatRange) {
  // A stride through every float exponent, positive and negative, NaN excluded.
  for (uint64_t u = 0; u < 0x7f800000u; u += 997) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float f = float_of(static_cast<uint32_t>(u) | sign);
      ASSERT_EQ(float_to_half(f), reference_float_to_half(f)) << std::hex << (u | sign);
    }
  }
}

TEST(Half, OverflowGoesToInfinity) {
  EXPECT_EQ(float_to_half(65504.0f), 0x7bffu);
  EXPECT_EQ(float_to_half(std::nextafter(65520.0f, 0.0f)), 0x7bffu);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00u);  // halfway to 2^16: ties to the even inf
  EXPECT_EQ(float_to_half(1e10f), 0x7c00u);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::max()), 0x7c00u);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::max()), 0xfc00u);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7c00u);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xfc00u);
}

TEST(Half, Subnormals) {
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001u);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000u);  // tie between 0 and 1: even
  EXPECT_EQ(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001u);
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002u);     // tie between 1 and 2: even
  EXPECT_EQ(float_to_half(std::ldexp(1023.0f, -24)), 0x03ffu);  // largest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(2047.0f, -25)), 0x0400u);  // rounds up into the normals
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::denorm_min()), 0x8000u);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000u);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x83ff), -std::ldexp(1023.0f, -24));
}

TEST(Half, NanStaysQuietNanWithSign) {
  EXPECT_EQ(float_to_half(float_of(0x7f800001u)), 0x7e00u);  // signalling, payload below f16
  EXPECT_EQ(float_to_half(float_of(0xffc00000u)), 0xfe00u);
  EXPECT_EQ(float_to_half(float_of(0x7fa02000u)), 0x7f01u);  // payload's top bits kept
  EXPECT_TRUE(half_is_nan(float_to_half(std::numeric_limits<float>::quiet_NaN())));
}

TEST(HalfBf16, EveryPatternWidensAndRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    ASSERT_EQ(bits_of(bf16_to_float(b)), i << 16);
    const bool nan = (i & 0x7fffu) > 0x7f80u;
    ASSERT_EQ(float_to_bf16(bf16_to_float(b)), nan ? (i | 0x40u) : i) << i;
  }
}

TEST(HalfBf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(float_of(0x3f808000u)), 0x3f80u);  // tie, even below
  EXPECT_EQ(float_to_bf16(float_of(0x3f818000u)), 0x3f82u);  // tie, even above
  EXPECT_EQ(float_to_bf16(float_of(0x3f808001u)), 0x3f81u);
  EXPECT_EQ(float_to_bf16(float_of(0x3f807fffu)), 0x3f80u);
  EXPECT_EQ(float_to_bf16(float_of(0xbf818000u)), 0xbf82u);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);  // overflow to inf
  EXPECT_EQ(float_to_bf16(float_of(0x7f7f7fffu)), 0x7f7fu);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80u);
  EXPECT_EQ(float_to_bf16(float_of(0x00008000u)), 0x0000u);  // subnormal tie to even zero
  for (uint64_t u = 0; u < 0x7f800000u; u += 1009) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float f = float_of(static_cast<uint32_t>(u) | sign);
      ASSERT_EQ(float_to_bf16(f), reference_float_to_bf16(f)) << std::hex << (u | sign);
    }
  }
}

TEST(HalfBf16, NanStaysQuietNan) {
  EXPECT_EQ(float_to_bf16(float_of(0x7f800001u)), 0x7fc0u);  // would truncate to inf
  EXPECT_EQ(float_to_bf16(float_of(0xff800001u)), 0xffc0u);
  EXPECT_EQ(float_to_bf16(float_of(0x7fffffffu)), 0x7fffu);  // must not carry into the sign
  EXPECT_EQ(float_to_bf16(float_of(0x7fc00000u)), 0x7fc0u);
}

}  // namespace
}  // namespace plait
