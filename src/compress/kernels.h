// The streaming passes the compressors are made of, vectorised for the CPU they run on
// (target_clones, or F16C intrinsics behind a CPU check for the half casts). Each is one pass
// over its arrays; `resid`, where taken, may be the same array as `src` (error feedback
// updates the corrected values in place).
#pragma once

#include <cstddef>
#include <cstdint>

namespace plait::compress::kernels {

// acc[i] += x[i]
void add(float* acc, const float* x, size_t n);
// max |x[i]|, and the sum of |x[i]|; the add_ forms first add x into acc (acc[i] += x[i])
// and fold the new acc: error feedback's correction and a chunk's scale in one pass.
float max_abs(const float* x, size_t n);
float sum_abs(const float* x, size_t n);
float add_max_abs(float* acc, const float* x, size_t n);
float add_sum_abs(float* acc, const float* x, size_t n);
float dot(const float* a, const float* b, size_t n);
// y[i] += a * x[i]
void axpy(float* y, float a, const float* x, size_t n);
void scale(float* x, float a, size_t n);

// Half and bfloat16 casts, round to nearest even. encode: x = in[i] (+ resid[i], with
// `resid`), wire[i] = cast(x), resid[i] = x - uncast(wire[i]): error feedback in the same
// pass. decode: out[i] (+)= uncast(wire[i]).
void encode_f16(const float* in, float* resid, uint16_t* wire, size_t n);
void decode_f16(const uint16_t* wire, float* out, size_t n, bool accumulate);
void encode_bf16(const float* in, float* resid, uint16_t* wire, size_t n);
void decode_bf16(const uint16_t* wire, float* out, size_t n, bool accumulate);

// QSGD on one chunk: q[i] = sign(src[i]) * floor(|src[i]| * levels / scale + u_i), u_i uniform
// in [0, 1) from a hash of (noise, i); with `resid`, resid[i] = src[i] - q[i] * scale / levels.
void quantize_int8(const float* src, int8_t* q, float* resid, size_t n, float scale, int levels,
                   uint64_t noise);
void dequantize_int8(const int8_t* q, float* out, size_t n, float step, bool accumulate);

// One sign bit per value (bit i % 8 of byte i / 8; 1: the sign bit is set, -0 included);
// with `resid`, resid[i] = src[i] -/+ scale.
void encode_sign(const float* src, uint8_t* bits, float* resid, size_t n, float scale);
void decode_sign(const uint8_t* bits, float* out, size_t n, float scale, bool accumulate);

// A 64-bit mix (splitmix64's finaliser): seeds and per-call noise.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace plait::compress::kernels
