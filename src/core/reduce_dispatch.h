// Which instruction-set variant of the reduction kernels runs. reduce_into() and friends use
// the best level this CPU supports, chosen once per process (the CPU does not change under a
// running process). The *_isa() entry points force a level so tests can check every variant
// the CPU supports against a scalar reference, and benchmarks can compare them.
#pragma once

#include <cstddef>
#include <string_view>

#include "plait/types.h"

namespace plait {

enum class IsaLevel : unsigned char {
  kBaseline,  // x86-64 baseline (SSE2) or the generic vector code on other CPUs
  kAvx2,      // AVX2 + F16C + FMA
  kAvx512,    // AVX-512 F/BW/VL/DQ + F16C + FMA
};
inline constexpr IsaLevel kAllIsaLevels[] = {IsaLevel::kBaseline, IsaLevel::kAvx2,
                                             IsaLevel::kAvx512};

std::string_view to_string(IsaLevel level);  // "baseline", "avx2", "avx512"
// Whether this CPU (and the OS, which must save the wider registers) can run `level`.
bool isa_supported(IsaLevel level);
// The level reduce_into(), reduce_inplace() and scale_divide() use.
IsaLevel active_isa_level();

// Same contracts as reduce.h, on the kernels of `level`; throw Error(kInvalidUsage) when the
// CPU lacks `level`.
void reduce_into_isa(IsaLevel level, DataType dtype, ReduceOp op, void* dst, const void* a,
                     const void* b, size_t count);
void scale_divide_isa(IsaLevel level, DataType dtype, void* data, size_t count, int divisor);

}  // namespace plait
