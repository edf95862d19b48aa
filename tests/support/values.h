// Typed test data: deterministic inputs whose reductions are exact in every dtype, and the
// local reference results that multi-rank tests compare against, bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "plait/types.h"

namespace plait::testing {

// A buffer of `count` elements of `dtype`.
struct TypedBuffer {
  DataType dtype = DataType::kF32;
  std::vector<uint8_t> bytes;
  TypedBuffer() = default;
  TypedBuffer(DataType t, size_t count, double fill = 0);
  size_t count() const { return bytes.size() / dtype_size(dtype); }
  void* data() { return bytes.data(); }
  double get(size_t i) const;
  void set(size_t i, double v);
};

// The input value of element i on `rank` for reductions with `op`: small integers chosen so
// that any reduction order gives the same exact result in every dtype (prod stays tiny).
double input_value(ReduceOp op, DataType dtype, int rank, size_t i);

// The reduction of input_value over ranks [0, size) for element i, rounded to the dtype the
// way the library rounds (avg: sum, then one division in float for float types).
double reduced_value(ReduceOp op, DataType dtype, int size, size_t i);

// A value identifying (rank, i) for data-movement collectives, exact in every dtype.
double tag_value(DataType dtype, int rank, size_t i);

// Index of the first element where a and b differ (bitwise), or -1.
long first_mismatch(const TypedBuffer& a, const TypedBuffer& b);

}  // namespace plait::testing
