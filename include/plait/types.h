// Element types and reduction operators of plait's collectives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace plait {

enum class DataType : uint8_t { kF32, kF64, kF16, kBF16, kI8, kU8, kI32, kI64 };
inline constexpr DataType kAllDataTypes[] = {DataType::kF32, DataType::kF64, DataType::kF16,
                                             DataType::kBF16, DataType::kI8, DataType::kU8,
                                             DataType::kI32, DataType::kI64};

// kAvg is a sum followed by a division by the number of contributors (integer division for
// integer types, as torch.distributed does not allow AVG on integers but MPI users expect it).
enum class ReduceOp : uint8_t { kSum, kProd, kMin, kMax, kAvg };
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                             ReduceOp::kMax, ReduceOp::kAvg};

constexpr size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kF64:
    case DataType::kI64: return 8;
    case DataType::kF32:
    case DataType::kI32: return 4;
    case DataType::kF16:
    case DataType::kBF16: return 2;
    case DataType::kI8:
    case DataType::kU8: return 1;
  }
  return 0;
}

std::string_view to_string(DataType t);   // "f32", "bf16", ...
std::string_view to_string(ReduceOp op);  // "sum", "avg", ...
std::optional<DataType> parse_dtype(std::string_view name);  // accepts "f32", "float32", "float"
std::optional<ReduceOp> parse_reduce_op(std::string_view name);

}  // namespace plait
