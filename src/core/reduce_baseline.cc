// Reduction kernels for any CPU: the generic vector code at 16 bytes (SSE2 on x86-64). The
// baseline has no f16 conversion unit, so f16 converts with integer and float vector
// arithmetic, bit-for-bit half_to_float / float_to_half (tests check every pattern).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/reduce_kernels.h"

namespace plait::reduce_detail {
namespace {

struct BaselineIsa {
  static constexpr size_t kBytes = 16;
  static constexpr size_t kHalves = kBytes / sizeof(float);
  using F32 = Vec<float, kBytes>;
  using U32 = Vec<uint32_t, kBytes>;
  using S32 = Vec<int32_t, kBytes>;  // for compares of values < 2^31: SSE2 has signed ones only
  using Packed = Vec<uint16_t, kHalves * sizeof(uint16_t)>;

  static S32 as_signed(U32 v) { return __builtin_bit_cast(S32, v); }

  static F32 f16_load(const uint16_t* p) {
    const U32 h = __builtin_convertvector(load_vec<Packed>(p), U32);
    const U32 magnitude = h & 0x7fffu;
    const U32 exponent = magnitude >> 10;
    // Normal: move the fields up and rebias the exponent (15 -> 127).
    const U32 normal = (magnitude << 13) + ((127u - 15u) << 23);
    // Subnormal: mantissa * 2^-24, exact through an int conversion, never a float denormal.
    const U32 subnormal =
        __builtin_bit_cast(U32, __builtin_convertvector(as_signed(magnitude), F32) * 0x1p-24f);
    // Inf and NaN: all-ones exponent, payload kept as is (half_to_float does not quiet).
    const U32 special = (magnitude << 13) | 0x7f800000u;
    U32 bits = as_signed(exponent) == 0 ? subnormal : normal;
    bits = as_signed(exponent) == 0x1f ? special : bits;
    return __builtin_bit_cast(F32, bits | ((h & 0x8000u) << 16));
  }

  static void f16_store(uint16_t* p, F32 v) {
    const U32 u = __builtin_bit_cast(U32, v);
    const U32 a = u & 0x7fffffffu;
    // Normal halves: rebias (127 -> 15), then round to nearest-even at bit 13.
    const U32 rebased = a - ((127u - 15u) << 23);
    const U32 normal = (rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13;
    // Below 2^-14: adding 0.5 leaves ulps of 2^-24, so the FPU's own nearest-even rounding
    // lands on a multiple of the f16 subnormal step; the bits above 0.5 count the steps.
    const U32 subnormal = __builtin_bit_cast(U32, __builtin_bit_cast(F32, a) + 0.5f) - 0x3f000000u;
    const U32 nan = 0x7e00u | ((a >> 13) & 0x3ffu);
    U32 bits = as_signed(a) < 0x38800000 ? subnormal : normal;
    bits = as_signed(a) >= 0x477ff000 ? U32{} + 0x7c00u : bits;  // overflow rounds to inf
    bits = as_signed(a) > 0x7f800000 ? nan : bits;
    bits |= (u >> 16) & 0x8000u;
    store_vec(p, __builtin_convertvector(bits, Packed));
  }
};

}  // namespace

extern const ReduceKernels kBaselineKernels;
constinit const ReduceKernels kBaselineKernels = make_kernels<BaselineIsa>();

}  // namespace plait::reduce_detail
