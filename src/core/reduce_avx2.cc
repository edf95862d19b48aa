// Reduction kernels for AVX2 + F16C + FMA (Haswell, Zen and later), 32-byte vectors.
// Compiled for that ISA with a target pragma, so the Release build needs no -march; the
// dispatcher in reduce.cc only calls into this table after checking the CPU.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/reduce_table.h"

// Everything with inline code is included above this line (see reduce_kernels.h).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c,fma")
#endif

#include "core/reduce_kernels.h"

namespace plait::reduce_detail {
namespace {

struct Avx2Isa {
  static constexpr size_t kBytes = 32;
  using F32 = Vec<float, kBytes>;
  static F32 f16_load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void f16_store(uint16_t* p, F32 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

}  // namespace

extern const ReduceKernels kAvx2Kernels;
constinit const ReduceKernels kAvx2Kernels = make_kernels<Avx2Isa>();

}  // namespace plait::reduce_detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // __x86_64__
