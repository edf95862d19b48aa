// Scalar reference kernels. (To be replaced by vectorised kernels with runtime dispatch.)
#include "core/reduce.h"

#include <algorithm>
#include <cstdint>

#include "core/half.h"

namespace plait {
namespace {

template <typename T>
T combine(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return static_cast<T>(a + b);
    case ReduceOp::kProd: return static_cast<T>(a * b);
    case ReduceOp::kMin: return std::min(a, b);
    case ReduceOp::kMax: return std::max(a, b);
  }
  return a;
}

template <typename T>
void run(ReduceOp op, void* dst, const void* a, const void* b, size_t n) {
  auto* d = static_cast<T*>(dst);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = combine(op, x[i], y[i]);
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void run16(ReduceOp op, void* dst, const void* a, const void* b, size_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = Store(combine(op, Load(x[i]), Load(y[i])));
}

}  // namespace

void reduce_into(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b,
                 size_t count) {
  switch (dtype) {
    case DataType::kF32: return run<float>(op, dst, a, b, count);
    case DataType::kF64: return run<double>(op, dst, a, b, count);
    case DataType::kF16: return run16<half_to_float, float_to_half>(op, dst, a, b, count);
    case DataType::kBF16: return run16<bf16_to_float, float_to_bf16>(op, dst, a, b, count);
    case DataType::kI8: return run<int8_t>(op, dst, a, b, count);
    case DataType::kU8: return run<uint8_t>(op, dst, a, b, count);
    case DataType::kI32: return run<int32_t>(op, dst, a, b, count);
    case DataType::kI64: return run<int64_t>(op, dst, a, b, count);
  }
}

void reduce_inplace(DataType dtype, ReduceOp op, void* dst, const void* src, size_t count) {
  reduce_into(dtype, op, dst, dst, src, count);
}

void scale_divide(DataType dtype, void* data, size_t count, int divisor) {
  auto div = [&](auto* p) {
    for (size_t i = 0; i < count; ++i) p[i] = static_cast<std::remove_reference_t<decltype(p[i])>>(p[i] / divisor);
  };
  switch (dtype) {
    case DataType::kF32: return div(static_cast<float*>(data));
    case DataType::kF64: return div(static_cast<double*>(data));
    case DataType::kI8: return div(static_cast<int8_t*>(data));
    case DataType::kU8: return div(static_cast<uint8_t*>(data));
    case DataType::kI32: return div(static_cast<int32_t*>(data));
    case DataType::kI64: return div(static_cast<int64_t*>(data));
    case DataType::kF16: {
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] = float_to_half(half_to_float(p[i]) / divisor);
      return;
    }
    case DataType::kBF16: {
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / divisor);
      return;
    }
  }
}

}  // namespace plait
