#include "compress/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/half.h"
#include "core/reduce_dispatch.h"

namespace plait::compress::kernels {
namespace {

// clang cannot multiversion a template (the fuzz build, docs/fuzzing.md): there the kernels
// are built once, for the baseline.
#if defined(__clang__)
#define PLAIT_COMPRESS_CLONES
#else
#define PLAIT_COMPRESS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

// A uniform draw in [0, 1) per (noise, index): a counter-based hash, so that the loop has no
// state carried from one value to the next and the compiler vectorises it.
inline float uniform01(uint32_t index, uint32_t noise_lo, uint32_t noise_hi) {
  uint32_t h = (index ^ noise_lo) * 0x9e3779b9u + noise_hi;
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  return static_cast<float>(h >> 8) * 0x1p-24f;
}

// One value of quantize(): its level, stochastically rounded, signed as x.
inline int quantize_one(float x, uint32_t index, uint32_t lo, uint32_t hi, float inv, float top) {
  const float a = std::min(std::fabs(x) * inv + uniform01(index, lo, hi), top);
  const int level = static_cast<int>(a);  // a >= 0: truncation floors
  return x < 0.0f ? -level : level;
}

#if defined(__x86_64__)
// quantize() 16 values at a time: the compiler's own vectors of this loop are 8 wide, and the
// loop is bound by its arithmetic (the hash's two multiplies, three conversions), not by
// memory. The same values as the scalar form, up to FMA contraction.
template <bool kResid>
__attribute__((target("avx512f,fma"))) void quantize_avx512(const float* src, int8_t* q, float* resid, uint32_t n,
                                                             uint32_t first, float inv, float step, float top,
                                                             uint32_t lo, uint32_t hi) {
  const __m512i vlo = _mm512_set1_epi32(static_cast<int>(lo)), vhi = _mm512_set1_epi32(static_cast<int>(hi));
  const __m512i mul1 = _mm512_set1_epi32(static_cast<int>(0x9e3779b9u));
  const __m512i mul2 = _mm512_set1_epi32(static_cast<int>(0x7feb352du));
  const __m512 vinv = _mm512_set1_ps(inv), vtop = _mm512_set1_ps(top), vstep = _mm512_set1_ps(step);
  const __m512 unit = _mm512_set1_ps(0x1p-24f), zero = _mm512_setzero_ps();
  __m512i index = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first)),
                                   _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m512i sixteen = _mm512_set1_epi32(16);
  const __mmask16 all = 0xffff;
  uint32_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 x = _mm512_loadu_ps(src + j);
    __m512i h = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_xor_si512(index, vlo), mul1), vhi);
    h = _mm512_xor_si512(h, _mm512_maskz_srli_epi32(all, h, 16));
    h = _mm512_mullo_epi32(h, mul2);
    h = _mm512_xor_si512(h, _mm512_maskz_srli_epi32(all, h, 15));
    const __m512 u = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(all, _mm512_maskz_srli_epi32(all, h, 8)), unit);
    const __m512 a = _mm512_maskz_min_ps(all, _mm512_fmadd_ps(_mm512_abs_ps(x), vinv, u), vtop);
    const __m512i level = _mm512_maskz_cvttps_epi32(all, a);
    const __mmask16 negative = _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ);
    const __m512i v = _mm512_mask_sub_epi32(level, negative, _mm512_setzero_si512(), level);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + j), _mm512_maskz_cvtepi32_epi8(all, v));
    if constexpr (kResid) _mm512_storeu_ps(resid + j, _mm512_fnmadd_ps(_mm512_maskz_cvtepi32_ps(all, v), vstep, x));
    index = _mm512_add_epi32(index, sixteen);
  }
  for (; j < n; ++j) {
    const int v = quantize_one(src[j], first + j, lo, hi, inv, top);
    q[j] = static_cast<int8_t>(v);
    if constexpr (kResid) resid[j] = src[j] - static_cast<float>(v) * step;
  }
}

const bool kAvx512 = isa_supported(IsaLevel::kAvx512);
#endif

template <bool kResid>
PLAIT_COMPRESS_CLONES void quantize(const float* src, int8_t* q, float* resid, size_t n,
                                    float inv, float step, int levels, uint64_t noise) {
  const auto lo = static_cast<uint32_t>(noise), hi = static_cast<uint32_t>(noise >> 32);
  const float top = static_cast<float>(levels);
  // A 32-bit counter for the hash's index (the same index mod 2^32 as before): a 64-bit one
  // makes the vectoriser carry and narrow 64-bit lanes, about a third of the loop's work.
  constexpr size_t kBlock = size_t{1} << 30;
  for (size_t base = 0; base < n; base += kBlock) {
    const auto m = static_cast<uint32_t>(std::min(n - base, kBlock));
    const auto first = static_cast<uint32_t>(base);
    const float* s = src + base;
    int8_t* out = q + base;
#if defined(__x86_64__)
    if (kAvx512) {
      quantize_avx512<kResid>(s, out, kResid ? resid + base : nullptr, m, first, inv, step, top, lo, hi);
      continue;
    }
#endif
    for (uint32_t j = 0; j < m; ++j) {
      const int v = quantize_one(s[j], first + j, lo, hi, inv, top);
      out[j] = static_cast<int8_t>(v);
      if constexpr (kResid) resid[base + j] = s[j] - static_cast<float>(v) * step;
    }
  }
}

template <bool kResid>
PLAIT_COMPRESS_CLONES void bf16_encode(const float* in, float* resid, uint16_t* wire, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = kResid ? in[i] + resid[i] : in[i];
    uint32_t u;
    std::memcpy(&u, &x, 4);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
    const auto b = static_cast<uint16_t>(nan ? (u >> 16) | 0x40u : rounded >> 16);
    wire[i] = b;
    if constexpr (kResid) {
      const uint32_t back = static_cast<uint32_t>(b) << 16;
      float f;
      std::memcpy(&f, &back, 4);
      resid[i] = x - f;
    }
  }
}

// ±1 for each bit of a byte (1: negative): a sign byte decodes as one 32-byte row.
struct SignTable {
  float row[256][8];
  constexpr SignTable() : row() {
    for (int b = 0; b < 256; ++b)
      for (int k = 0; k < 8; ++k) row[b][k] = (b >> k) & 1 ? -1.0f : 1.0f;
  }
};
constexpr SignTable kSigns;

#if defined(__x86_64__)
const bool kAvx2 = isa_supported(IsaLevel::kAvx2);  // with F16C and FMA

__attribute__((target("avx2,f16c"))) void f16_encode_avx2(const float* in, float* resid,
                                                          uint16_t* wire, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(in + i);
    if (resid) x = _mm256_add_ps(x, _mm256_loadu_ps(resid + i));
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(wire + i), h);
    if (resid) _mm256_storeu_ps(resid + i, _mm256_sub_ps(x, _mm256_cvtph_ps(h)));
  }
  for (; i < n; ++i) {
    const float x = resid ? in[i] + resid[i] : in[i];
    wire[i] = float_to_half(x);
    if (resid) resid[i] = x - half_to_float(wire[i]);
  }
}

// Eight sign bits at once: the sign bits of eight floats are one movemask.
__attribute__((target("avx2"))) void sign_bits_avx2(const float* src, uint8_t* bits, size_t bytes) {
  for (size_t b = 0; b < bytes; ++b)
    bits[b] = static_cast<uint8_t>(_mm256_movemask_ps(_mm256_loadu_ps(src + 8 * b)));
}

__attribute__((target("avx2,f16c"))) void f16_decode_avx2(const uint16_t* wire, float* out,
                                                          size_t n, bool accumulate) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wire + i)));
    if (accumulate) x = _mm256_add_ps(x, _mm256_loadu_ps(out + i));
    _mm256_storeu_ps(out + i, x);
  }
  for (; i < n; ++i) out[i] = (accumulate ? out[i] : 0.0f) + half_to_float(wire[i]);
}
#endif

}  // namespace

PLAIT_COMPRESS_CLONES void add(float* acc, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += x[i];
}

// Eight partial results, combined at the end: the shape the vectoriser turns into one
// vector register (a single running max or sum is a chain it may not reorder).
template <bool kAdd, bool kMax>
PLAIT_COMPRESS_CLONES float fold_abs(float* acc, const float* x, size_t n) {
  float s[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t l = 0; l < 8; ++l) {
      float v = x[i + l];
      if constexpr (kAdd) v = acc[i + l] += v;
      const float a = std::fabs(v);
      if constexpr (kMax) s[l] = a > s[l] ? a : s[l];
      else s[l] += a;
    }
  }
  for (; i < n; ++i) {
    float v = x[i];
    if constexpr (kAdd) v = acc[i] += v;
    const float a = std::fabs(v);
    if constexpr (kMax) s[0] = a > s[0] ? a : s[0];
    else s[0] += a;
  }
  if constexpr (kMax) {
    for (size_t l = 1; l < 8; ++l) s[0] = s[l] > s[0] ? s[l] : s[0];
    return s[0];
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

float max_abs(const float* x, size_t n) { return fold_abs<false, true>(nullptr, x, n); }
float add_max_abs(float* acc, const float* x, size_t n) { return fold_abs<true, true>(acc, x, n); }
float add_sum_abs(float* acc, const float* x, size_t n) { return fold_abs<true, false>(acc, x, n); }

float sum_abs(const float* x, size_t n) { return fold_abs<false, false>(nullptr, x, n); }

PLAIT_COMPRESS_CLONES float dot(const float* a, const float* b, size_t n) {
  float s[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t l = 0; l < 8; ++l) s[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

PLAIT_COMPRESS_CLONES void axpy(float* y, float a, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

PLAIT_COMPRESS_CLONES void scale(float* x, float a, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] *= a;
}

void encode_f16(const float* in, float* resid, uint16_t* wire, size_t n) {
#if defined(__x86_64__)
  if (kAvx2) return f16_encode_avx2(in, resid, wire, n);
#endif
  for (size_t i = 0; i < n; ++i) {
    const float x = resid ? in[i] + resid[i] : in[i];
    wire[i] = float_to_half(x);
    if (resid) resid[i] = x - half_to_float(wire[i]);
  }
}

void decode_f16(const uint16_t* wire, float* out, size_t n, bool accumulate) {
#if defined(__x86_64__)
  if (kAvx2) return f16_decode_avx2(wire, out, n, accumulate);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = (accumulate ? out[i] : 0.0f) + half_to_float(wire[i]);
}

void encode_bf16(const float* in, float* resid, uint16_t* wire, size_t n) {
  if (resid)
    bf16_encode<true>(in, resid, wire, n);
  else
    bf16_encode<false>(in, nullptr, wire, n);
}

PLAIT_COMPRESS_CLONES void decode_bf16(const uint16_t* wire, float* out, size_t n, bool accumulate) {
  if (accumulate) {
    for (size_t i = 0; i < n; ++i) out[i] += bf16_to_float(wire[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(wire[i]);
  }
}

void quantize_int8(const float* src, int8_t* q, float* resid, size_t n, float scale, int levels,
                   uint64_t noise) {
  const float inv = scale > 0.0f ? static_cast<float>(levels) / scale : 0.0f;
  const float step = scale / static_cast<float>(levels);
  if (resid)
    quantize<true>(src, q, resid, n, inv, step, levels, noise);
  else
    quantize<false>(src, q, nullptr, n, inv, step, levels, noise);
}

PLAIT_COMPRESS_CLONES void dequantize_int8(const int8_t* q, float* out, size_t n, float step,
                                           bool accumulate) {
  if (accumulate) {
    for (size_t i = 0; i < n; ++i) out[i] += static_cast<float>(q[i]) * step;
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(q[i]) * step;
  }
}

PLAIT_COMPRESS_CLONES void encode_sign(const float* src, uint8_t* bits, float* resid, size_t n,
                                       float scale) {
  const size_t whole = n / 8;
#if defined(__x86_64__)
  if (kAvx2) {
    sign_bits_avx2(src, bits, whole);
  } else
#endif
  {
    for (size_t b = 0; b < whole; ++b) {
      unsigned v = 0;
      for (unsigned k = 0; k < 8; ++k) v |= static_cast<unsigned>(std::signbit(src[8 * b + k])) << k;
      bits[b] = static_cast<uint8_t>(v);
    }
  }
  if (whole * 8 < n) {
    unsigned v = 0;
    for (size_t i = whole * 8; i < n; ++i) v |= static_cast<unsigned>(std::signbit(src[i])) << (i - whole * 8);
    bits[whole] = static_cast<uint8_t>(v);
  }
  if (resid)
    for (size_t i = 0; i < n; ++i) resid[i] = src[i] - std::copysign(scale, src[i]);
}

PLAIT_COMPRESS_CLONES void decode_sign(const uint8_t* bits, float* out, size_t n, float scale,
                                       bool accumulate) {
  const size_t whole = n / 8;
  for (size_t b = 0; b < whole; ++b) {
    const float* row = kSigns.row[bits[b]];
    float* o = out + 8 * b;
    for (size_t k = 0; k < 8; ++k) o[k] = accumulate ? o[k] + row[k] * scale : row[k] * scale;
  }
  for (size_t i = whole * 8; i < n; ++i) {
    const float v = (bits[i >> 3] >> (i & 7)) & 1u ? -scale : scale;
    out[i] = accumulate ? out[i] + v : v;
  }
}

}  // namespace plait::compress::kernels
