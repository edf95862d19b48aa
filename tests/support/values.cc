#include "support/values.h"

#include <cmath>
#include <cstring>

#include "core/element.h"

namespace plait::testing {

TypedBuffer::TypedBuffer(DataType t, size_t count, double fill)
    : dtype(t), bytes(count * dtype_size(t)) {
  for (size_t i = 0; i < count; ++i) set(i, fill);
}

double TypedBuffer::get(size_t i) const { return load_element(dtype, bytes.data(), i); }

void TypedBuffer::set(size_t i, double v) { store_element(dtype, bytes.data(), i, v); }

double input_value(ReduceOp op, DataType dtype, int rank, size_t i) {
  if (op == ReduceOp::kProd) return ((rank + i) % 3 == 0) ? 2 : 1;  // products stay <= 2^3
  double v = static_cast<double>((rank * 7 + i * 3) % 11);         // 0..10
  if (dtype != DataType::kU8) v -= 3;                               // -3..7
  return v;
}

static bool is_float(DataType t) {
  return t == DataType::kF32 || t == DataType::kF64 || t == DataType::kF16 || t == DataType::kBF16;
}

double reduced_value(ReduceOp op, DataType dtype, int size, size_t i) {
  double acc = input_value(op, dtype, 0, i);
  for (int r = 1; r < size; ++r) {
    double x = input_value(op, dtype, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += x; break;
      case ReduceOp::kProd: acc *= x; break;
      case ReduceOp::kMin: acc = std::min(acc, x); break;
      case ReduceOp::kMax: acc = std::max(acc, x); break;
    }
  }
  if (op != ReduceOp::kAvg) return acc;
  if (!is_float(dtype)) return std::trunc(acc / size);  // integer division truncates
  // The library divides in the dtype's arithmetic: f64 in double, the others in float.
  if (dtype == DataType::kF64) return acc / size;
  return static_cast<double>(static_cast<float>(acc) / static_cast<float>(size));
}

double tag_value(DataType dtype, int rank, size_t i) {
  // Distinct per (rank, i) in the low bits, within range of every dtype (i8: -128..127).
  return static_cast<double>((rank * 31 + i * 7) % 100);
}

long first_mismatch(const TypedBuffer& a, const TypedBuffer& b) {
  size_t elem = dtype_size(a.dtype);
  if (a.bytes.size() != b.bytes.size()) return 0;
  for (size_t i = 0; i * elem < a.bytes.size(); ++i)
    if (std::memcmp(a.bytes.data() + i * elem, b.bytes.data() + i * elem, elem) != 0)
      return static_cast<long>(i);
  return -1;
}

}  // namespace plait::testing
