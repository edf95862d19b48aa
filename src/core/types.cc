#include "plait/types.h"

#include <string>

namespace plait {

std::string_view to_string(DataType t) {
  switch (t) {
    case DataType::kF32: return "f32";
    case DataType::kF64: return "f64";
    case DataType::kF16: return "f16";
    case DataType::kBF16: return "bf16";
    case DataType::kI8: return "i8";
    case DataType::kU8: return "u8";
    case DataType::kI32: return "i32";
    case DataType::kI64: return "i64";
  }
  return "?";
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "?";
}

std::optional<DataType> parse_dtype(std::string_view name) {
  struct Alias { std::string_view name; DataType type; };
  static constexpr Alias kAliases[] = {
      {"f32", DataType::kF32},   {"float32", DataType::kF32}, {"float", DataType::kF32},
      {"f64", DataType::kF64},   {"float64", DataType::kF64}, {"double", DataType::kF64},
      {"f16", DataType::kF16},   {"float16", DataType::kF16}, {"half", DataType::kF16},
      {"bf16", DataType::kBF16}, {"bfloat16", DataType::kBF16},
      {"i8", DataType::kI8},     {"int8", DataType::kI8},
      {"u8", DataType::kU8},     {"uint8", DataType::kU8},
      {"i32", DataType::kI32},   {"int32", DataType::kI32},   {"int", DataType::kI32},
      {"i64", DataType::kI64},   {"int64", DataType::kI64},
  };
  for (const Alias& a : kAliases)
    if (a.name == name) return a.type;
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (ReduceOp op : kAllReduceOps)
    if (to_string(op) == name) return op;
  if (name == "product") return ReduceOp::kProd;
  if (name == "mean") return ReduceOp::kAvg;
  return std::nullopt;
}

}  // namespace plait
