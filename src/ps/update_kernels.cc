#include "ps/update_kernels.h"

#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/reduce.h"
#include "plait/error.h"

namespace plait::ps {
namespace {

// clang cannot multiversion a template (the fuzz build, docs/fuzzing.md): there the kernels
// are built once, for the baseline.
#if defined(__clang__)
#define PLAIT_PS_CLONES
#else
#define PLAIT_PS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

template <typename T>
PLAIT_PS_CLONES void sgd(T* __restrict w, const T* __restrict g, size_t n, T lr, T wd) {
  for (size_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
}

template <typename T>
PLAIT_PS_CLONES void momentum(T* __restrict w, T* __restrict v, const T* __restrict g, size_t n,
                              T lr, T mu, T wd, bool first) {
  // PyTorch's SGD: the buffer starts as the first gradient, then v = mu v + g.
  if (first) {
    for (size_t i = 0; i < n; ++i) {
      const T d = g[i] + wd * w[i];
      v[i] = d;
      w[i] -= lr * d;
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const T d = g[i] + wd * w[i];
    v[i] = mu * v[i] + d;
    w[i] -= lr * v[i];
  }
}

template <typename T>
PLAIT_PS_CLONES void adam(T* __restrict w, T* __restrict m, T* __restrict v, const T* __restrict g,
                          size_t n, T step_size, T b1, T b2, T eps, T inv_sqrt_bc2, T wd) {
  for (size_t i = 0; i < n; ++i) {
    const T d = g[i] + wd * w[i];
    m[i] = b1 * m[i] + (T(1) - b1) * d;
    v[i] = b2 * v[i] + (T(1) - b2) * d * d;
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
  }
}

template <typename T>
PLAIT_PS_CLONES void add(T* __restrict w, const T* __restrict g, size_t n) {
  for (size_t i = 0; i < n; ++i) w[i] += g[i];
}

template <typename T>
void apply_typed(const Update& u, T* w, const T* g, OptimizerSlots s, size_t n, uint64_t step) {
  const T lr = static_cast<T>(u.lr), wd = static_cast<T>(u.weight_decay);
  switch (u.rule) {
    case Rule::kSum:
    case Rule::kMean: add(w, g, n); return;
    case Rule::kSgd: sgd(w, g, n, lr, wd); return;
    case Rule::kMomentum:
      momentum(w, static_cast<T*>(s.m), g, n, lr, static_cast<T>(u.momentum), wd, step == 1);
      return;
    case Rule::kAdam: {
      // Bias correction folded into two scalars: w -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
      const double bc1 = 1.0 - std::pow(static_cast<double>(u.beta1), static_cast<double>(step));
      const double bc2 = 1.0 - std::pow(static_cast<double>(u.beta2), static_cast<double>(step));
      adam(w, static_cast<T*>(s.m), static_cast<T*>(s.v), g, n, static_cast<T>(u.lr / bc1),
           static_cast<T>(u.beta1), static_cast<T>(u.beta2), static_cast<T>(u.eps),
           static_cast<T>(1.0 / std::sqrt(bc2)), wd);
      return;
    }
  }
}

void convert_in(DataType dtype, float* dst, const uint16_t* src, size_t n, bool add) {
  if (dtype == DataType::kBF16) {
    for (size_t i = 0; i < n; ++i) dst[i] = (add ? dst[i] : 0.0f) + bf16_to_float(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = (add ? dst[i] : 0.0f) + half_to_float(src[i]);
  }
}

}  // namespace

void load_into(DataType dtype, void* acc, const void* src, size_t n) {
  if (acc_type(dtype) == dtype) {
    std::memcpy(acc, src, n * dtype_size(dtype));
    return;
  }
  convert_in(dtype, static_cast<float*>(acc), static_cast<const uint16_t*>(src), n, false);
}

void add_into(DataType dtype, void* acc, const void* src, size_t n) {
  if (acc_type(dtype) == dtype) {
    reduce_inplace(dtype, ReduceOp::kSum, acc, src, n);
    return;
  }
  convert_in(dtype, static_cast<float*>(acc), static_cast<const uint16_t*>(src), n, true);
}

void divide(DataType dtype, void* acc, size_t n, int divisor) {
  scale_divide(acc_type(dtype), acc, n, divisor);
}

void store_from(DataType dtype, void* dst, const void* acc, size_t n) {
  if (acc_type(dtype) == dtype) {
    if (dst != acc) std::memcpy(dst, acc, n * dtype_size(dtype));
    return;
  }
  const float* a = static_cast<const float*>(acc);
  auto* d = static_cast<uint16_t*>(dst);
  if (dtype == DataType::kBF16) {
    for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16(a[i]);
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = float_to_half(a[i]);
  }
}

void apply_rule(DataType dtype, const Update& u, void* w, const void* g, OptimizerSlots slots,
                size_t n, uint64_t step) {
  switch (acc_type(dtype)) {
    case DataType::kF32:
      return apply_typed(u, static_cast<float*>(w), static_cast<const float*>(g), slots, n, step);
    case DataType::kF64:
      return apply_typed(u, static_cast<double*>(w), static_cast<const double*>(g), slots, n, step);
    default:
      if (u.rule == Rule::kSum || u.rule == Rule::kMean) return reduce_inplace(dtype, ReduceOp::kSum, w, g, n);
      throw invalid_usage("the " + std::string(to_string(u.rule)) + " rule needs a floating-point key, not " +
                          std::string(to_string(dtype)));
  }
}

}  // namespace plait::ps
