// The contract between the dispatcher (reduce.cc) and the per-ISA kernel files
// (reduce_baseline.cc, reduce_avx2.cc, reduce_avx512.cc): each of those fills one table, a
// constant-initialised object, so choosing a variant never runs code compiled for an ISA the
// CPU might lack.
#pragma once

#include <cstddef>

#include "plait/types.h"

namespace plait::reduce_detail {

// dst[i] = a[i] (op) b[i]; dst may alias a or b exactly, never partially.
using CombineFn = void (*)(void* dst, const void* a, const void* b, size_t count);
// data[i] /= divisor; divisor != 0 (the dispatcher checks).
using DivideFn = void (*)(void* data, size_t count, int divisor);

inline constexpr size_t kDataTypeCount = sizeof(kAllDataTypes) / sizeof(kAllDataTypes[0]);
// kSum, kProd, kMin, kMax; kAvg is served by the kSum entry.
inline constexpr size_t kCombineOpCount = 4;

struct ReduceKernels {
  CombineFn combine[kDataTypeCount][kCombineOpCount];
  DivideFn divide[kDataTypeCount];
};

extern const ReduceKernels kBaselineKernels;
#if defined(__x86_64__)
extern const ReduceKernels kAvx2Kernels;
extern const ReduceKernels kAvx512Kernels;
#endif

}  // namespace plait::reduce_detail
