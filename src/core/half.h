// IEEE binary16 and bfloat16 <-> float conversions, round-to-nearest-even, NaN preserved.
#pragma once

#include <cstdint>
#include <cstring>

namespace plait {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

inline float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace plait
