#include "compress/quantized_sum.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "compress/kernels.h"

namespace plait::compress::detail {
namespace {

constexpr int kLaneMax = 32767;

}  // namespace

size_t QuantizedSum::elements(size_t count) const {
  return wire == Wire::kI16Pairs ? (count + 1) / 2 : count;
}

std::string QuantizedSum::describe() const {
  const char* name = wire == Wire::kI8 ? "i8" : wire == Wire::kI16Pairs ? "i16 pairs in i32" : "i32";
  return std::string(name) + " (" + std::to_string(levels) + " levels)";
}

QuantizedSum plan_quantized_sum(int ranks, int levels) {
  const int n = std::max(1, ranks);
  if (n <= 127) return {.wire = QuantizedSum::Wire::kI8, .levels = std::min(levels, 127 / n)};
  if (n <= kLaneMax) return {.wire = QuantizedSum::Wire::kI16Pairs, .levels = std::min(levels, kLaneMax / n)};
  return {.wire = QuantizedSum::Wire::kI32, .levels = std::min(levels, INT32_MAX / n)};
}

void pack_quanta(const QuantizedSum& plan, const int8_t* q, size_t count, void* wire) {
  switch (plan.wire) {
    case QuantizedSum::Wire::kI8:
      std::memcpy(wire, q, count);
      return;
    case QuantizedSum::Wire::kI16Pairs: {
      auto* w = static_cast<int32_t*>(wire);
      for (size_t i = 0; i + 1 < count; i += 2) w[i / 2] = q[i] + 65536 * q[i + 1];
      if (count % 2) w[count / 2] = q[count - 1];
      return;
    }
    case QuantizedSum::Wire::kI32: {
      auto* w = static_cast<int32_t*>(wire);
      for (size_t i = 0; i < count; ++i) w[i] = q[i];
      return;
    }
  }
}

void dequantize_sums(const QuantizedSum& plan, const void* wire, size_t first, size_t n, float step,
                     float* out) {
  switch (plan.wire) {
    case QuantizedSum::Wire::kI8:
      kernels::dequantize_int8(static_cast<const int8_t*>(wire) + first, out, n, step, false);
      return;
    case QuantizedSum::Wire::kI16Pairs: {
      const auto* w = static_cast<const int32_t*>(wire);
      for (size_t i = first; i < first + n; ++i) {
        const int32_t word = w[i / 2];
        // The low lane is the word's low 16 bits, signed; what is left is 65536 * the high one.
        const int32_t lo = static_cast<int16_t>(static_cast<uint32_t>(word) & 0xffffu);
        const int32_t sum = i % 2 ? (word - lo) / 65536 : lo;
        out[i - first] = static_cast<float>(sum) * step;
      }
      return;
    }
    case QuantizedSum::Wire::kI32: {
      const auto* w = static_cast<const int32_t*>(wire) + first;
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(w[i]) * step;
      return;
    }
  }
}

}  // namespace plait::compress::detail
