// Reduction kernels for AVX-512 F/BW/VL/DQ (Skylake-SP, Ice Lake, Zen 4 and later), 64-byte
// vectors. BW gives byte/word lanes, DQ 64-bit multiplies. Compiled with a target pragma; the
// dispatcher in reduce.cc only calls into this table after checking the CPU and OS.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/reduce_table.h"

// Everything with inline code is included above this line (see reduce_kernels.h).
#if defined(__clang__)
#pragma clang attribute push( \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")
#endif

#include "core/reduce_kernels.h"

namespace plait::reduce_detail {
namespace {

// The maskz forms with a full mask compile to the plain instructions; the unmasked
// intrinsics trip GCC 12's -Wmaybe-uninitialized inside its own headers.
constexpr __mmask16 kAllLanes = 0xffff;

struct Avx512Isa {
  static constexpr size_t kBytes = 64;
  using F32 = Vec<float, kBytes>;
  static F32 f16_load(const uint16_t* p) {
    return _mm512_maskz_cvtph_ps(kAllLanes,
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void f16_store(uint16_t* p, F32 v) {
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(p),
        _mm512_maskz_cvtps_ph(kAllLanes, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

}  // namespace

extern const ReduceKernels kAvx512Kernels;
constinit const ReduceKernels kAvx512Kernels = make_kernels<Avx512Isa>();

}  // namespace plait::reduce_detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // __x86_64__
