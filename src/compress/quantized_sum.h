// How the ranks' QSGD quanta (int8 values in [-levels, levels]) are summed by a plain integer
// allreduce without overflow, at any rank count: n ranks' sum is at most n * levels in size.
//
//   n <= 127          int8, one byte a value, with the levels cut to 127 / n (as few as 1);
//   n <= 32767        two 16-bit lanes in each int32 word (lo + 65536 * hi, both signed), two
//                     bytes a value, levels cut to 32767 / n: each lane's sum stays within 16
//                     bits, so the word's sum is exact and the lanes come apart again;
//   beyond            int32, four bytes a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "plait/types.h"

namespace plait::compress::detail {

struct QuantizedSum {
  enum class Wire : uint8_t { kI8, kI16Pairs, kI32 };
  Wire wire = Wire::kI8;
  int levels = 1;  // per sign, what every rank quantises with

  DataType dtype() const { return wire == Wire::kI8 ? DataType::kI8 : DataType::kI32; }
  // Elements of dtype() that carry `count` values.
  size_t elements(size_t count) const;
  size_t bytes(size_t count) const { return elements(count) * dtype_size(dtype()); }
  std::string describe() const;  // "i8 (42 levels)", for AllreduceStats::path
};

// `levels`: what the compressor asks for (1..127); never more in the plan.
QuantizedSum plan_quantized_sum(int ranks, int levels);

// Writes the quanta q[0..count) as the wire's elements (`wire`: bytes(count)).
void pack_quanta(const QuantizedSum& plan, const int8_t* q, size_t count, void* wire);
// out[i] = step * (the summed quantum first + i), i < n, from the summed wire.
void dequantize_sums(const QuantizedSum& plan, const void* wire, size_t first, size_t n, float step,
                     float* out);

}  // namespace plait::compress::detail
