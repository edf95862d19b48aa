// The server's arithmetic on a partition: aggregating pushes into an accumulator and applying
// an update rule to the parameters. Accumulators and parameters are kept in the key's
// arithmetic type (acc_type: f32 for f16/bf16 keys, the fp32 master copy; the key's own type
// otherwise); pushes arrive in the key's type. f32 and f64 loops are compiled for AVX-512,
// AVX2 and the baseline, picked at run time; same-type sums use the reduction kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "plait/ps.h"
#include "plait/types.h"

namespace plait::ps {

// The type the server computes a key of `dtype` in.
constexpr DataType acc_type(DataType dtype) {
  return dtype == DataType::kF16 || dtype == DataType::kBF16 ? DataType::kF32 : dtype;
}
constexpr bool is_float(DataType dtype) {
  return dtype == DataType::kF32 || dtype == DataType::kF64 || dtype == DataType::kF16 ||
         dtype == DataType::kBF16;
}

// acc = src (first push of a round), acc += src (the others); src in `dtype`, acc in
// acc_type(dtype).
void load_into(DataType dtype, void* acc, const void* src, size_t n);
void add_into(DataType dtype, void* acc, const void* src, size_t n);
// acc *= 1 / divisor (kMean); integer keys divide (truncating).
void divide(DataType dtype, void* acc, size_t n, int divisor);
// dst (dtype) = acc (acc_type), rounding to nearest even for f16/bf16.
void store_from(DataType dtype, void* dst, const void* acc, size_t n);

// Optimizer state of one partition, in acc_type (empty for kSum/kMean and kSgd).
struct OptimizerSlots {
  void* m = nullptr;  // momentum buffer, or Adam's first moment
  void* v = nullptr;  // Adam's second moment
};
// w -= the rule's step for gradient g (both acc_type, float keys only); `step` is 1 for the
// first update (Adam's bias correction). kSum/kMean are not optimizers: w += g.
void apply_rule(DataType dtype, const Update& u, void* w, const void* g, OptimizerSlots slots,
                size_t n, uint64_t step);

}  // namespace plait::ps
