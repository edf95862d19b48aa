// Reduction kernels: elementwise combine of two arrays of one dtype. Vectorised with
// runtime dispatch (AVX-512 / AVX2+F16C / scalar), so one Release binary runs on any x86-64.
// f16 and bf16 are converted to f32, combined in f32 and rounded back to nearest-even, so a
// single combine is exact to the precision of the format.
#pragma once

#include <cstddef>

#include "plait/types.h"

namespace plait {

// dst[i] = dst[i] (op) src[i], i < count. kAvg combines as kSum (divide with scale_divide).
void reduce_inplace(DataType dtype, ReduceOp op, void* dst, const void* src, size_t count);
// dst[i] = a[i] (op) b[i]; dst may alias a or b.
void reduce_into(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b,
                 size_t count);
// data[i] /= divisor (integer division for integer dtypes); the last step of kAvg.
void scale_divide(DataType dtype, void* data, size_t count, int divisor);

// The kernel reduce_into() would run, resolved once for callers that combine many times (a
// collective's every round): dst[i] = a[i] (op) b[i], dst may alias a or b, any count, no
// checks. `few`: the calls carry at most kFewElements elements, where a plain loop beats the
// vector kernels' setup (the results are the same, bit for bit). Throws kInvalidUsage for an
// unknown dtype or op.
using CombineFn = void (*)(void* dst, const void* a, const void* b, size_t count);
inline constexpr size_t kFewElements = 8;
CombineFn combine_kernel(DataType dtype, ReduceOp op, bool few);

}  // namespace plait
